"""FusedBatchNormalization: Keras' batch norm's outputs, gradients, moving statistics, dtypes
and config, computed by TensorFlow's fused kernel on a CPU (#42)."""

from __future__ import annotations

import doctest

import keras
import numpy as np
import pytest

from cvbench.detection.batchnorm import FreezableBatchNormalization
from cvbench.models import batchnorm as batchnorm_module
from cvbench.models.batchnorm import FusedBatchNormalization, set_fused_batchnorm
from cvbench.models.layers import tensorflow_on_cpu_only
from cvbench.utils.model_layers import all_layers
from cvbench.utils.plain_keras import to_plain_keras
from cvbench.zoo import get_model

agnostic = pytest.mark.backend_agnostic


def _tf_cpu() -> bool:
    return keras.config.backend() == "tensorflow" and tensorflow_on_cpu_only()


def _pair(policy: str = "float32", **kwargs):
    """A FusedBatchNormalization and a BatchNormalization with the same arguments."""
    from cvbench.training.precision import dtype_policy_scope

    with dtype_policy_scope(policy):
        return FusedBatchNormalization(**kwargs), keras.layers.BatchNormalization(**kwargs)


def _random_weights(layers, channels: int) -> None:
    """The same non-trivial gamma, beta, moving mean and moving variance in every layer."""
    rng = np.random.default_rng(1)
    values = {
        "gamma": rng.uniform(0.5, 1.5, channels),
        "beta": rng.normal(size=channels),
        "moving_mean": rng.normal(size=channels),
        "moving_variance": rng.uniform(0.5, 2.0, channels),
    }
    for layer in layers:
        for name, value in values.items():
            if getattr(layer, name, None) is not None:
                getattr(layer, name).assign(value.astype("float32"))


def _run(layer, x, r, training):
    """(output, d loss/d x, d loss/d gamma, d loss/d beta, moving mean, moving variance) on
    TensorFlow, loss = sum(y * r) for a fixed random r (every element its own gradient)."""
    import tensorflow as tf

    x, r = tf.constant(x), tf.constant(r)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=training)
        loss = tf.reduce_sum(tf.cast(y, "float32") * r)
    grads = tape.gradient(loss, [x, layer.gamma, layer.beta])
    stats = [layer.moving_mean, layer.moving_variance]
    return [np.asarray(tf.cast(t, "float32")) for t in [y, *grads, *stats]]


def _reference(x, r, layer, training, momentum=0.9, epsilon=1e-5):
    """What batch norm computes, in float64, from the layer's weights before the call:
    (y, dx, dgamma, dbeta, moving mean, moving variance) for loss = sum(y * r), and the size
    of dx's terms (gamma / sqrt(var + eps) * max|r|), against which its error is measured.

    Training: xhat = (x - m) / sqrt(v + eps) with the batch's mean m and population variance
    v (n values per channel), y = gamma * xhat + beta, and the textbook gradient
    dx = gamma / sqrt(v + eps) * (r - mean(r) - xhat * mean(r * xhat)); moving statistics
    s <- s * momentum + batch * (1 - momentum). Inference: m, v are the moving ones and
    dx = gamma / sqrt(v + eps) * r.
    """
    x, r = x.astype("float64"), r.astype("float64")
    axes = (0, 1, 2)
    gamma, beta = (np.asarray(w, "float64") for w in (layer.gamma, layer.beta))
    moving = [np.asarray(w, "float64") for w in (layer.moving_mean, layer.moving_variance)]
    if training:
        m, v = x.mean(axes), x.var(axes)
    else:
        m, v = moving
    inv = 1.0 / np.sqrt(v + epsilon)
    xhat = (x - m) * inv
    y = gamma * xhat + beta
    if training:
        dx = gamma * inv * (r - r.mean(axes) - xhat * (r * xhat).mean(axes))
        moving = [s * momentum + b * (1 - momentum) for s, b in zip(moving, (m, v), strict=True)]
    else:
        dx = gamma * inv * r
    scale = float(np.max(gamma * inv) * np.abs(r).max())
    return [y, dx, (r * xhat).sum(axes), r.sum(axes), *moving], scale


SHAPES = [
    (2, 3, 3, 4),
    (3, 5, 7, 8),
    (1, 1, 1, 3),  # one value per channel: variance 0, as Keras (not TF's n/(n-1) = 0/0)
    (2, 1, 1, 3),  # two values: population variance = TF's corrected one * (2-1)/2
]


@pytest.fixture(params=[True, False], ids=["avx512", "avx2"])
def fused_in_training(request, monkeypatch):
    """Whether training calls take the fused kernel (`fused_in_training`: the CPU decides), so
    that both rules are tested on every CPU."""
    monkeypatch.setattr(batchnorm_module, "fused_in_training", lambda: request.param)
    return request.param


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_outputs_gradients_and_statistics_equal_batchnorm(shape, training, fused_in_training):
    """Both layers against the float64 reference, to float32 rounding of the terms' size.
    (Against each other they differ by more where the gradient cancels: with 2 values per
    channel xhat = +-1 and dx is the small difference of terms of size gamma/sqrt(v+eps).)"""
    if keras.config.backend() != "tensorflow":
        pytest.skip("gradients through TensorFlow's tape")
    x = np.random.default_rng(0).normal(2.0, 3.0, size=shape).astype("float32")
    r = np.random.default_rng(2).normal(size=shape).astype("float32")
    fused, plain = _pair(momentum=0.9, epsilon=1e-5)
    fused.build(shape)
    plain.build(shape)
    _random_weights([fused, plain], shape[-1])
    want, scale = _reference(x, r, fused, training)
    names = ["y", "dx", "dgamma", "dbeta", "moving mean", "moving variance"]
    for layer in (fused, plain):
        got = _run(layer, x, r, training)
        for name, a, b in zip(names, got, want, strict=True):
            tol = 1e-5 * scale * (x.size if name in ("dgamma", "dbeta") else 1)
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=tol, err_msg=f"{layer}: {name}")


def test_the_fused_kernel_runs_in_train_and_inference_graphs(fused_in_training):
    """The recipe's epsilon (1e-5) included: the first prototype skipped the kernel under
    1.001e-5 (TensorFlow's GPU minimum), so its measurement was of Keras' own layer. On AVX2
    (`fused_in_training` False) training runs Keras' operations, inference the kernel."""
    if not _tf_cpu():
        pytest.skip("the fused kernel runs on TensorFlow without a GPU")
    import tensorflow as tf

    def op_types(layer, training):
        fn = tf.function(lambda x: layer(x, training=training))
        graph = fn.get_concrete_function(tf.TensorSpec((2, 4, 4, 3))).graph
        return {op.type for op in graph.get_operations()}

    for epsilon in (1e-5, 1.001e-5, 1e-3):
        layer = FusedBatchNormalization(epsilon=epsilon)
        layer.build((2, 4, 4, 3))
        for training in (True, False):
            ops = op_types(layer, training)
            fused = not training or fused_in_training
            assert ("FusedBatchNormV3" in ops) == fused, (epsilon, training, ops)
            assert ("SquaredDifference" in ops) == (training and not fused), (epsilon, ops)
    layer.fused = False
    assert "SquaredDifference" in op_types(layer, True)
    assert "FusedBatchNormV3" not in op_types(layer, False)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_output_dtype_and_values(policy, fused_in_training):
    if keras.config.backend() != "tensorflow":
        pytest.skip("gradients through TensorFlow's tape")
    shape = (4, 5, 5, 6)
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    fused, plain = _pair(policy)
    fused.build(shape)
    plain.build(shape)
    _random_weights([fused, plain], shape[-1])
    import tensorflow as tf

    x = tf.cast(x, fused.compute_dtype)  # the dtype the previous layer hands it
    r = np.random.default_rng(2).normal(size=shape).astype("float32")
    for training in (True, False):
        (a, *grads_a), (b, *grads_b) = (_run(la, x, r, training) for la in (fused, plain))
        assert fused(x, training=False).dtype == fused.compute_dtype
        # one bfloat16 rounding of |y| < 8: 2^-8 * 8 = 0.03 (float16: 2^-11 * 8)
        np.testing.assert_allclose(a, b, atol=0.032)
        # dx (the compute dtype) and dgamma, dbeta (float32, sums over 100 values): to a
        # bfloat16 rounding of their largest term's size
        for name, ga, gb in zip(["dx", "dgamma", "dbeta"], grads_a[:3], grads_b[:3], strict=True):
            np.testing.assert_allclose(ga, gb, atol=2**-7 * np.abs(gb).max(), err_msg=name)
    np.testing.assert_allclose(fused.moving_mean, plain.moving_mean, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(fused.moving_variance, plain.moving_variance, rtol=1e-3)
    for w in fused.weights:
        assert w.dtype == "float32", w.path


@pytest.mark.parametrize("policy", ["float64", "float16", "bfloat16"])
def test_a_policy_whose_variables_are_not_float32_is_keras_layer(policy):
    """The kernel's statistics are float32 only: under these policies the layer is Keras'
    (review of stop 52: every builder's first call failed under them)."""
    x = np.random.default_rng(0).normal(size=(2, 3, 3, 4)).astype("float32")
    fused, plain = _pair(policy)
    assert not fused.uses_fused_kernel(4) and not fused.uses_fused_kernel(4, training=True)
    for training in (True, False):
        a, b = fused(x, training=training), plain(x, training=training)
        assert a.dtype == b.dtype == policy
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    from cvbench.training.precision import dtype_policy_scope

    with dtype_policy_scope(policy):
        model = get_model("resnet18", input_shape=(32, 32, 3), num_classes=3)
    out = model.predict(np.zeros((1, 32, 32, 3), "float32"), verbose=0)
    assert out.shape == (1, 3)


@pytest.mark.parametrize("scale, center", [(False, True), (True, False), (False, False)])
def test_without_scale_or_center(scale, center):
    x = np.random.default_rng(0).normal(size=(2, 3, 3, 4)).astype("float32")
    fused, plain = _pair(scale=scale, center=center)
    for training in (True, False):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(fused(x, training=training)),
            keras.ops.convert_to_numpy(plain(x, training=training)),
            atol=1e-5,
        )
    assert len(fused.weights) == len(plain.weights)


@agnostic
def test_trainable_false_normalizes_with_moving_statistics_and_keeps_them():
    """Keras' rule: a frozen layer (`trainable=False`) is in inference mode even in training.
    Fresh statistics (mean 0, variance 1): y = x / sqrt(1 + 1e-3) for x = 5: 4.9975."""
    layer = FusedBatchNormalization(trainable=False)
    y = layer(np.full((2, 2, 2, 3), 5.0, "float32"), training=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(y), 4.9975, atol=1e-4)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.moving_mean), 0.0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.moving_variance), 1.0)


def test_frozen_freezable_batchnorm_trains_gamma_and_beta_only():
    """SSD's `freeze_batchnorm`: moving statistics fixed, gamma and beta get gradients."""
    if not _tf_cpu():
        pytest.skip("the fused kernel runs on TensorFlow without a GPU")
    import tensorflow as tf

    layer = FreezableBatchNormalization(frozen=True)
    assert layer.uses_fused_kernel()
    x = np.random.default_rng(0).normal(size=(2, 3, 3, 4)).astype("float32")
    r = np.random.default_rng(2).normal(size=x.shape).astype("float32")
    y, dx, dgamma, dbeta, mean, variance = _run(layer, x, r, training=True)
    # inference with mean 0, variance 1: y = x / sqrt(1 + 1e-3); dbeta = sum of r per channel
    np.testing.assert_allclose(y, x / np.sqrt(1.001), rtol=1e-5)
    np.testing.assert_allclose(dbeta, r.sum(axis=(0, 1, 2)), rtol=1e-5)
    np.testing.assert_allclose(dgamma, (r * x / np.sqrt(1.001)).sum(axis=(0, 1, 2)), rtol=1e-4)
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_array_equal(variance, 1.0)
    assert tf.reduce_all(tf.math.is_finite(dx))


@agnostic
def test_falls_back_to_keras_where_the_kernel_does_not_apply(monkeypatch):
    """Rank 2 and a mask run Keras' own operations, with Keras' results; so does training
    where oneDNN's training kernel is slow (AVX2)."""
    fused = FusedBatchNormalization()
    monkeypatch.setattr(batchnorm_module, "fused_in_training", lambda: False)
    assert fused.uses_fused_kernel(4) == _tf_cpu()
    assert not fused.uses_fused_kernel(4, training=True)
    monkeypatch.setattr(batchnorm_module, "fused_in_training", lambda: True)
    assert fused.uses_fused_kernel(4, training=True) == _tf_cpu()
    assert not fused.uses_fused_kernel(2)
    assert not fused.uses_fused_kernel(4, masked=True)
    assert not FusedBatchNormalization(axis=1).uses_fused_kernel(4)
    assert not FusedBatchNormalization(fused=False).uses_fused_kernel(4)
    assert FusedBatchNormalization().uses_fused_kernel(4) == _tf_cpu()
    x = np.random.default_rng(0).normal(size=(6, 4)).astype("float32")
    plain = keras.layers.BatchNormalization()
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(fused(x, training=True)),
        keras.ops.convert_to_numpy(plain(x, training=True)),
        atol=1e-6,
    )


@agnostic
def test_axis_may_come_first_as_in_keras():
    assert FusedBatchNormalization(-1, fused=False).axis == -1
    assert FusedBatchNormalization(1).axis == 1


@agnostic
def test_config_round_trip_and_bad_fused_value():
    layer = FusedBatchNormalization(fused=False, momentum=0.9, epsilon=1e-5, name="bn")
    again = FusedBatchNormalization.from_config(layer.get_config())
    assert again.fused is False and again.momentum == 0.9 and again.epsilon == 1e-5
    with pytest.raises(ValueError, match="fused must be a bool, got 'yes'"):
        FusedBatchNormalization(fused="yes")


@agnostic
def test_builders_use_it_and_user_files_hold_plain_batchnorm():
    """Every batch norm of the ResNet, Inception V3 and SSD builders is fused; the plain
    copy for users has `BatchNormalization` only, with the same weights."""
    for name, kwargs in [
        ("resnet18", {"input_shape": (32, 32, 3), "num_classes": 3}),
        ("inception_v3", {"input_shape": (75, 75, 3), "num_classes": 3}),
        ("ssd320", {"image_size": 64, "num_classes": 3, "backbone": "resnet18"}),
    ]:
        model = get_model(name, **kwargs)
        norms = [la for la in all_layers(model) if isinstance(la, keras.layers.BatchNormalization)]
        assert norms and all(isinstance(la, FusedBatchNormalization) for la in norms), name
        if name == "ssd320":
            continue  # the SSD's plain copy is tested with its exports
        plain = to_plain_keras(model)
        kinds = {type(la) for la in all_layers(plain)}
        assert keras.layers.BatchNormalization in kinds and FusedBatchNormalization not in kinds
        for a, b in zip(model.get_weights(), plain.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)


@agnostic
def test_set_fused_batchnorm_turns_every_layer_off_and_on():
    model = get_model("resnet18", input_shape=(32, 32, 3), num_classes=3)
    norms = [la for la in all_layers(model) if isinstance(la, FusedBatchNormalization)]
    assert set_fused_batchnorm(model, False) is model
    assert not any(la.fused for la in norms)
    set_fused_batchnorm(model, True)
    assert all(la.fused for la in norms)
    plain = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)], name="plain")
    with pytest.raises(ValueError, match="model 'plain' has no FusedBatchNormalization"):
        set_fused_batchnorm(plain, True)
    with pytest.raises(ValueError, match="enabled must be a bool, got 1"):
        set_fused_batchnorm(model, 1)


@agnostic
def test_doctest():
    assert doctest.testmod(batchnorm_module).failed == 0
