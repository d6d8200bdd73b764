"""FastConv2D: Conv2D's outputs, gradients, dtypes, config and weight files; faster on TF CPU."""

from __future__ import annotations

import doctest
import subprocess
import sys

import keras
import numpy as np
import pytest

from cvbench.models import layers as layers_module
from cvbench.models.layers import FastConv2D, set_fast_gradients
from cvbench.utils.model_layers import all_layers
from cvbench.zoo import get_model


def _tf_fast_path() -> bool:
    """Where the fast gradients apply: TensorFlow without a GPU (this test machine)."""
    return keras.config.backend() == "tensorflow" and layers_module.tensorflow_on_cpu_only()


def _pair(policy: str = "float32", **kwargs):
    """A FastConv2D and a Conv2D with the same arguments and weights."""
    from cvbench.training.precision import dtype_policy_scope

    with dtype_policy_scope(policy):
        fast = FastConv2D(4, **kwargs)
        plain = keras.layers.Conv2D(4, **kwargs)
    return fast, plain


def _outputs_and_grads(layer, x):
    """(output, d loss/d x, d loss/d kernel, d loss/d bias) under TensorFlow's tape, where the
    loss is sum(y^2) in float32 (every output element gets a different gradient)."""
    import tensorflow as tf

    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(tf.cast(y, "float32") ** 2)
    return [y, *tape.gradient(loss, [x, layer.kernel, layer.bias])]


CONVOLUTIONS = [
    (1, "valid", 1),
    (1, "same", 1),
    (3, "same", 1),
    ((1, 7), "same", 1),
    ((7, 1), "same", 1),
    (5, "same", 1),
    (1, "valid", 2),  # 7 columns: ceil(7 / 2) = 4 outputs, from columns 0, 2, 4, 6
    (1, "same", 2),
]


@pytest.fixture
def cpu_kinds(monkeypatch):
    """Sets which convolutions this CPU gives fast gradients (`fast_gradient_kinds`), so
    that every path is tested on every CPU."""

    def use(kinds: str) -> None:
        monkeypatch.setattr(layers_module, "_this_cpu_kinds", lambda: kinds)

    return use


@pytest.mark.parametrize("kinds", [layers_module.ALL, layers_module.POINTWISE])
@pytest.mark.parametrize("kernel, padding, strides", CONVOLUTIONS)
def test_outputs_and_all_gradients_equal_conv2d(kernel, padding, strides, kinds, cpu_kinds):
    cpu_kinds(kinds)
    x = np.random.default_rng(0).normal(size=(2, 6, 7, 5)).astype("float32")
    fast, plain = _pair(kernel_size=kernel, strides=strides, padding=padding)
    fast.build(x.shape)
    plain.build(x.shape)
    plain.set_weights(fast.get_weights())
    # POINTWISE (a CPU with AVX-512): stride-1 1x1 convolutions only.
    pointwise = kernel == 1 and strides == 1
    assert fast.uses_fast_gradients() == (_tf_fast_path() and (kinds == "all" or pointwise))
    for got, want in zip(_outputs_and_grads(fast, x), _outputs_and_grads(plain, x), strict=True):
        np.testing.assert_allclose(np.float32(got), np.float32(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "policy, tolerance",
    # bfloat16 keeps 8 significant bits (relative rounding 2^-8 = 0.004) and float16 11 bits
    # (2^-11 = 0.0005); two implementations round differently, so a few units of that.
    [("mixed_bfloat16", 0.05), ("mixed_float16", 0.01)],
)
def test_mixed_precision_gradients_have_conv2d_dtypes_and_values(policy, tolerance, cpu_kinds):
    cpu_kinds(layers_module.ALL)  # the fast path of each kind of convolution
    x = np.random.default_rng(1).normal(size=(2, 5, 6, 3)).astype("float32")
    for kernel, strides in ((3, 1), (1, 2), (1, 1)):
        fast, plain = _pair(policy, kernel_size=kernel, strides=strides, padding="same")
        fast.build(x.shape)
        plain.build(x.shape)
        plain.set_weights(fast.get_weights())
        got, want = _outputs_and_grads(fast, x), _outputs_and_grads(plain, x)
        # Output in the compute dtype; input gradient float32 (the cast's gradient);
        # kernel and bias gradients float32 (the variables' dtype).
        assert [g.dtype for g in got] == [w.dtype for w in want]
        assert got[0].dtype == {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}[policy]
        for a, b in zip(got, want, strict=True):
            a, b = np.float32(a), np.float32(b)
            np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * np.abs(b).max())


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(strides=2),  # a strided 3x3
        dict(dilation_rate=2),
        dict(groups=2),
        dict(padding="valid"),
        {"kernel_size": 2},
        {"fast_gradients": False},
    ],
)
def test_other_convolutions_are_keras_own(kwargs):
    args = dict(kernel_size=3, padding="same") | kwargs
    fast_gradients = args.pop("fast_gradients", True)
    fast, plain = _pair(**args)
    fast.fast_gradients = fast_gradients
    x = np.random.default_rng(1).normal(size=(1, 8, 8, 4)).astype("float32")
    fast.build(x.shape)
    plain.build(x.shape)
    plain.set_weights(fast.get_weights())
    assert not fast.uses_fast_gradients()
    np.testing.assert_allclose(np.float32(fast(x)), np.float32(plain(x)), rtol=1e-6)


def test_an_even_kernel_is_refused_by_the_fast_function():
    import tensorflow as tf

    with pytest.raises(ValueError, match="odd height and width, got 2x3"):
        layers_module.conv2d_fast_gradients(tf.zeros((1, 4, 4, 1)), tf.zeros((2, 3, 1, 1)))


def test_bad_fast_gradients_values_are_named():
    with pytest.raises(ValueError, match="fast_gradients must be a bool, got 'yes'"):
        FastConv2D(2, 3, fast_gradients="yes")
    inputs = keras.Input((8, 8, 3))
    plain_model = keras.Model(inputs, keras.layers.Conv2D(2, 3, name="c")(inputs), name="plain")
    with pytest.raises(ValueError, match="model 'plain' has no FastConv2D layer"):
        set_fast_gradients(plain_model, False)
    with pytest.raises(ValueError, match="enabled must be a bool, got 1"):
        set_fast_gradients(plain_model, 1)


@pytest.mark.parametrize(
    "name, count",
    # ResNet-18: the stem, 2 convs in each of 8 blocks, 3 projection shortcuts: 1 + 16 + 3.
    # Inception V3: 5 stem units, 3 x 7 (mixed0-2), 4, 4 x 10 (mixed4-7), 6, 2 x 9: 94.
    [("resnet18", 20), ("inception_v3", 94)],
)
def test_builders_use_fast_conv2d(name, count):
    model = get_model(name, num_classes=3, input_shape=(75, 75, 3))
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len(convs) == count and all(type(c) is FastConv2D for c in convs)


def test_the_switch_reaches_the_nested_backbone_of_the_ssd():
    # The SSD's ResNet backbone is a nested model built by the ResNet builder; its FPN and
    # head keep Keras' Conv2D (FastConv2D measured no gain there, docs/benchmarks.md).
    ssd = get_model("ssd320", num_classes=2, image_size=64, backbone="resnet18")
    convs = [layer for layer in all_layers(ssd) if isinstance(layer, keras.layers.Conv2D)]
    fast = [c for c in convs if type(c) is FastConv2D]
    assert len(fast) == 20  # ResNet-18's convolutions (test_builders_use_fast_conv2d)
    assert all(type(c) is keras.layers.Conv2D for c in convs if c not in fast)
    assert set_fast_gradients(ssd, False) is ssd
    assert not any(c.fast_gradients or c.uses_fast_gradients() for c in fast)
    set_fast_gradients(ssd, True)
    assert all(c.fast_gradients for c in fast)


@pytest.mark.backend_agnostic
def test_other_backends_compute_conv2d_without_tensorflow():
    # Under JAX this runs Keras' own convolution (and imports no TensorFlow).
    x = np.random.default_rng(2).normal(size=(2, 6, 6, 3)).astype("float32")
    fast, plain = _pair(kernel_size=3, padding="same")
    fast.build(x.shape)
    plain.build(x.shape)
    plain.set_weights(fast.get_weights())
    if keras.config.backend() != "tensorflow":
        assert not fast.uses_fast_gradients()  # (test_model_registry: no TensorFlow import)
    got, want = (keras.ops.convert_to_numpy(layer(x)) for layer in (fast, plain))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    config = fast.get_config()
    assert config["fast_gradients"] is True
    assert FastConv2D.from_config(config).get_config() == config


def test_saved_model_loads_in_a_process_that_imported_only_cvbench_models(tmp_path):
    model = get_model("resnet18", num_classes=3, input_shape=(32, 32, 3))
    path = tmp_path / "resnet18.keras"
    model.save(path)
    x = np.random.default_rng(3).normal(size=(1, 32, 32, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", keras.ops.convert_to_numpy(model(x, training=False)))
    script = (
        "import numpy as np, keras, cvbench.models\n"
        f"m = keras.saving.load_model({str(path)!r})\n"
        "assert type(m.get_layer('conv2_block1_1_conv')).__name__ == 'FastConv2D'\n"
        f"y = keras.ops.convert_to_numpy(m(np.load({str(tmp_path / 'x.npy')!r})))\n"
        f"np.testing.assert_allclose(y, np.load({str(tmp_path / 'y.npy')!r}), atol=1e-6)\n"
        "print('loaded')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("loaded")


def test_docstring_example():
    result = doctest.testmod(layers_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
