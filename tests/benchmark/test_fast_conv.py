"""FastConv2D: same outputs and gradients as Conv2D, forward-convolution gradients on TF."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.benchmark.fast_conv import (
    FastConv2D,
    _fusable,
    _tensorflow_on_cpu_only,
    with_fast_convolutions,
)


def _outputs_and_grads(layer, x):
    import tensorflow as tf

    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(tf.cast(y, "float32") ** 2)
    return [np.float32(v) for v in [y, *tape.gradient(loss, [x, layer.kernel, layer.bias])]]


@pytest.mark.parametrize(
    "kernel, padding, strides",
    [
        (1, "valid", 1),
        (1, "same", 1),
        (3, "same", 1),
        ((1, 7), "same", 1),
        ((7, 1), "same", 1),
        (5, "same", 1),
        (1, "valid", 2),  # 7 columns: ceil(7 / 2) = 4 outputs, from columns 0, 2, 4, 6
        (1, "same", 2),
    ],
)
def test_outputs_and_all_gradients_equal_conv2d(kernel, padding, strides):
    x = np.random.default_rng(0).normal(size=(2, 6, 7, 5)).astype("float32")
    fast = FastConv2D(4, kernel, strides=strides, padding=padding)
    plain = keras.layers.Conv2D(4, kernel, strides=strides, padding=padding)
    fast.build(x.shape)
    plain.build(x.shape)
    plain.set_weights(fast.get_weights())
    assert _fusable(fast, x) == _tensorflow_on_cpu_only()  # the fast path is for CPUs
    for got, want in zip(_outputs_and_grads(fast, x), _outputs_and_grads(plain, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(strides=2),  # a strided 3x3
        dict(dilation_rate=2),
        dict(groups=2),
        dict(padding="valid"),
        {"kernel_size": 2},
    ],
)
def test_other_convolutions_are_keras_own(kwargs):
    args = dict(filters=4, kernel_size=3, padding="same") | kwargs
    layer = FastConv2D(**args)
    x = np.random.default_rng(1).normal(size=(1, 8, 8, 4)).astype("float32")
    layer.build(x.shape)
    assert not _fusable(layer, x)
    plain = keras.layers.Conv2D(**args)
    plain.build(x.shape)
    plain.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.float32(layer(x)), np.float32(plain(x)), rtol=1e-6)


def test_swapped_model_keeps_weights_and_serializes():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 3))
    outputs = keras.layers.Conv2D(2, 3, padding="same", name="c")(inputs)
    model = keras.Model(inputs, outputs)
    fast = with_fast_convolutions(model)
    assert type(fast.get_layer("c")) is FastConv2D
    x = np.ones((1, 6, 6, 3), "float32")
    np.testing.assert_allclose(np.float32(fast(x)), np.float32(model(x)), rtol=1e-6)
    again = keras.Model.from_config(fast.get_config())
    assert type(again.get_layer("c")) is FastConv2D
