"""FastConv2D outside a gradient tape (inference) runs Conv2D's own operation: no
custom-gradient wrapper in the traced graph, the same outputs; under a tape (a train step)
it keeps the fast gradients (#42)."""

from __future__ import annotations

import collections

import keras
import numpy as np
import pytest

from cvbench.models import layers as layers_module
from cvbench.models.layers import FastConv2D
from cvbench.zoo import get_model

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "tensorflow" or not layers_module.tensorflow_on_cpu_only(),
    reason="the fast gradients exist only on TensorFlow without a GPU",
)


def _op_types(fn, *args) -> collections.Counter:
    """Operation types of the graph `tf.function(fn)` traces for `args`."""
    import tensorflow as tf

    graph = tf.function(fn).get_concrete_function(*args).graph
    return collections.Counter(op.type for op in graph.get_operations())


def _taped(layer):
    """`layer`'s call traced under a tape, as a train step traces the forward pass."""
    import tensorflow as tf

    def call(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
        return y, tape.gradient(tf.reduce_sum(y), x)

    return call


@pytest.fixture
def cpu_kinds(monkeypatch):
    """Sets which convolutions this CPU gives fast gradients (`fast_gradient_kinds`)."""

    def use(kinds: str) -> None:
        monkeypatch.setattr(layers_module, "_this_cpu_kinds", lambda: kinds)

    return use


@pytest.mark.parametrize("kernel, strides", [(3, 1), (1, 2), (1, 1)])
def test_untaped_call_is_conv2d_own_op_and_taped_call_keeps_fast_gradients(
    kernel, strides, cpu_kinds
):
    import tensorflow as tf

    cpu_kinds(layers_module.ALL)  # every one of these takes the fast path under a tape

    x = tf.constant(np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype("float32"))
    fast = FastConv2D(4, kernel, strides=strides, padding="same")
    plain = keras.layers.Conv2D(4, kernel, strides=strides, padding="same")
    fast.build(x.shape)
    plain.build(x.shape)
    plain.set_weights(fast.get_weights())
    assert fast.uses_fast_gradients()
    untaped = _op_types(lambda x: fast(x), x)
    # Without a tape: one Conv2D and nothing of the wrapper (IdentityN) or of the strided
    # 1x1 path (the StridedSlice that subsamples the input).
    assert untaped["Conv2D"] == 1
    assert untaped["IdentityN"] == 0 and untaped["StridedSlice"] == 0
    assert _op_types(lambda x: fast(x), x) == _op_types(lambda x: plain(x), x)
    # Under a tape: the custom gradient's IdentityN is there (the fast gradients are used).
    assert _op_types(_taped(fast), x)["IdentityN"] >= 1
    np.testing.assert_allclose(np.float32(fast(x)), np.float32(plain(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name, kinds, fast",
    # ResNet-50 has 53 convolutions, ResNet-18 20: each a plain Conv2D in inference. Under a
    # tape every fast one adds one IdentityN. ALL (AVX2): all but the 7x7/2 stem and the
    # three strided 3x3 convolutions of v1.5, 53 - 4 = 49 and 20 - 4 = 16 (before the
    # change the inference graph had those IdentityN ops too). POINTWISE (AVX-512): the
    # stride-1 1x1 ones, ResNet-50's two per bottleneck (16 x 2) and the first stage's
    # stride-1 projection shortcut: 33; ResNet-18's basic blocks have none (its three
    # shortcuts are strided): 0.
    [
        ("resnet50", "all", 49),
        ("resnet18", "all", 16),
        ("resnet50", "pointwise", 33),
        ("resnet18", "pointwise", 0),
    ],
)
def test_inference_graph_of_resnet_has_no_custom_gradient_wrappers(name, kinds, fast, cpu_kinds):
    import tensorflow as tf

    cpu_kinds(kinds)

    model = get_model(name, num_classes=3, input_shape=(32, 32, 3))
    x = tf.zeros((2, 32, 32, 3))
    ops = _op_types(lambda x: model(x, training=False), x)
    assert ops["Conv2D"] == {"resnet50": 53, "resnet18": 20}[name]
    assert ops["IdentityN"] == 0
    taped = _op_types(_taped(lambda x: model(x, training=True)), x)
    assert taped["IdentityN"] == fast


def test_gradients_recorded_follows_the_tape():
    import tensorflow as tf

    assert not layers_module.gradients_recorded()
    with tf.GradientTape():
        assert layers_module.gradients_recorded()
        with tf.autodiff.ForwardAccumulator(tf.constant(1.0), tf.constant(1.0)):
            assert layers_module.gradients_recorded()
    assert not layers_module.gradients_recorded()
