"""The fused batch-norm prototype computes what Keras' BatchNormalization computes."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from throughput_suite.fused_batchnorm import FusedBatchNormalization, with_fused_batchnorm


def _pair(policy: str, **kwargs):
    with _scope(policy):
        fused = FusedBatchNormalization(momentum=0.9, epsilon=1.001e-5, **kwargs)
        plain = keras.layers.BatchNormalization(momentum=0.9, epsilon=1.001e-5, **kwargs)
    return fused, plain


def _scope(policy: str):
    from cvbench.training.precision import dtype_policy_scope

    return dtype_policy_scope(policy)


def _grads(layer, x):
    import tensorflow as tf

    weights = tf.range(x.shape[-1], dtype="float32")
    with tf.GradientTape() as tape:
        y = layer(x, training=True)
        loss = tf.reduce_sum(tf.cast(y, "float32") ** 2 * weights)
    return y, tape.gradient(loss, [layer.gamma, layer.beta])


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_training_outputs_statistics_and_gradients_match_keras(policy):
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(4, 5, 5, 8)).astype("float32")
    fused, plain = _pair(policy)
    y_fused, g_fused = _grads(fused, x)
    y_plain, g_plain = _grads(plain, x)
    assert y_fused.dtype == y_plain.dtype
    np.testing.assert_allclose(np.float32(y_fused), np.float32(y_plain), atol=1e-5)
    # The kernel's Bessel-corrected variance (n / (n - 1), n = 100) is converted back to the
    # population variance Keras moves.
    pairs = [(fused.moving_mean, plain.moving_mean), (fused.moving_variance, plain.moving_variance)]
    for a, b in pairs:
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5)
    for a, b in zip(g_fused, g_plain, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(
        np.float32(fused(x, training=False)), np.float32(plain(x, training=False)), atol=1e-5
    )


def test_inputs_it_cannot_fuse_fall_back_to_keras():
    x = np.random.default_rng(1).normal(size=(3, 6, 4)).astype("float32")  # 3-D
    fused, plain = _pair("float32")
    assert not fused._fusable(keras.ops.convert_to_tensor(x), None)
    np.testing.assert_allclose(
        np.float32(fused(x, training=True)), np.float32(plain(x, training=True)), atol=1e-6
    )


def test_swapping_into_a_model_keeps_weights_and_function():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 3))
    h = keras.layers.BatchNormalization(name="bn")(keras.layers.Conv2D(4, 3)(inputs))
    model = keras.Model(inputs, h)
    model.get_layer("bn").moving_mean.assign(np.arange(4, dtype="float32"))
    swapped = with_fused_batchnorm(model)
    assert type(swapped.get_layer("bn")) is FusedBatchNormalization
    x = np.random.default_rng(2).normal(size=(2, 6, 6, 3)).astype("float32")
    np.testing.assert_allclose(
        np.float32(swapped(x, training=False)), np.float32(model(x, training=False)), atol=1e-5
    )
