"""Prototype: `Conv2D` whose input gradient is a forward convolution (a speed change to try).

On TensorFlow's CPU kernels, `Conv2DBackpropInput` (the gradient of a convolution with
respect to its input) runs 1.2x-5x slower than a forward convolution doing the same
arithmetic, worst on small feature maps (ResNet-50's last stage). For a stride-1
convolution with an odd kernel and "same" padding (or any 1x1 convolution) that gradient
*is* a forward convolution: the output gradient convolved, with "same" padding, by the
kernel flipped in space with its input and output channels swapped. The filter gradient
(`Conv2DBackpropFilter`, also slower than the arithmetic needs) is one matrix product per
kernel tap (`shifted x^T g` over all pixels). A strided 1x1 convolution is a stride-1 one on
the subsampled input. `FastConv2D` computes those gradients that way on the TensorFlow
backend (`tf.custom_gradient`): the same values up to float rounding. Other strided,
dilated, grouped or even-sized convolutions, and other backends (XLA on JAX has no such
slow kernels), and TensorFlow with a GPU (cuDNN's kernels), use `keras.layers.Conv2D`
unchanged.

It belongs with the model builders (`cvbench.models.common`); it lives here until they take
it. `with_fast_convolutions` swaps it into a built model for an A/B measurement.
"""

from __future__ import annotations

import functools

import keras


@functools.cache
def _tensorflow_on_cpu_only() -> bool:
    """TensorFlow without a GPU (on GPUs cuDNN's gradient kernels are not the slow ones)."""
    import tensorflow as tf

    return not tf.config.list_logical_devices("GPU")


def _fusable(layer: keras.layers.Conv2D, inputs) -> bool:
    kh, kw = layer.kernel_size
    one_by_one = kh == kw == 1  # any stride: a strided 1x1 convolution reads x[:, ::s, ::s]
    odd_same = (
        layer.padding == "same" and kh % 2 == 1 and kw % 2 == 1 and tuple(layer.strides) == (1, 1)
    )
    return (
        keras.config.backend() == "tensorflow"
        and layer.data_format == "channels_last"
        and tuple(layer.dilation_rate) == (1, 1)
        and layer.groups == 1
        and len(inputs.shape) == 4
        and (one_by_one or odd_same)
        and _tensorflow_on_cpu_only()
    )


def _filter_gradient(x, g, kh: int, kw: int):
    """The kernel gradient of a stride-1 "same" convolution: for each of the `kh x kw` taps,
    the matrix product of the correspondingly shifted (zero-padded) input and the output
    gradient over all pixels."""
    import tensorflow as tf

    c, o = x.shape[-1], g.shape[-1]
    h, w = tf.shape(x)[1], tf.shape(x)[2]
    padded = tf.pad(x, [[0, 0], [kh // 2, kh // 2], [kw // 2, kw // 2], [0, 0]])
    g = tf.reshape(g, [-1, o])
    taps = [
        tf.matmul(tf.reshape(padded[:, i : i + h, j : j + w, :], [-1, c]), g, transpose_a=True)
        for i in range(kh)
        for j in range(kw)
    ]
    return tf.reshape(tf.stack(taps), [kh, kw, c, o])


def conv2d_fast_gradients(x, kernel):
    """Stride-1 "same" convolution (odd kernel sizes) with matrix-product gradients.

    Args:
        x: `(B, H, W, C)` TensorFlow tensor.
        kernel: `(kh, kw, C, O)`, kh and kw odd.

    Returns:
        `(B, H, W, O)`, `tf.nn.conv2d(x, kernel, 1, "SAME")`.
    """
    import tensorflow as tf

    @tf.custom_gradient
    def conv(x, kernel):
        y = tf.nn.conv2d(x, kernel, 1, "SAME")

        def grad(g):
            flipped = tf.transpose(tf.reverse(kernel, [0, 1]), [0, 1, 3, 2])
            gx = tf.nn.conv2d(g, flipped, 1, "SAME")
            return gx, _filter_gradient(x, g, kernel.shape[0], kernel.shape[1])

        return y, grad

    return conv(tf.convert_to_tensor(x), tf.convert_to_tensor(kernel))


@keras.saving.register_keras_serializable(package="cvbench")
class FastConv2D(keras.layers.Conv2D):
    """`keras.layers.Conv2D` with forward-convolution gradients where they apply (see the
    module docstring); same variables, config and outputs.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 5, 5, 3)).astype("float32")
        >>> fast = FastConv2D(4, 3, padding="same", kernel_initializer="ones")
        >>> plain = keras.layers.Conv2D(4, 3, padding="same", kernel_initializer="ones")
        >>> bool(np.allclose(keras.ops.convert_to_numpy(fast(x)),
        ...                  keras.ops.convert_to_numpy(plain(x)), atol=1e-5))
        True
    """

    def convolution_op(self, inputs, kernel):
        if not _fusable(self, inputs):
            return super().convolution_op(inputs, kernel)
        sh, sw = self.strides
        if (sh, sw) != (1, 1):  # 1x1: the strided convolution of the subsampled input
            inputs = inputs[:, ::sh, ::sw, :]
        return conv2d_fast_gradients(inputs, kernel)


def with_fast_convolutions(model: keras.Model) -> keras.Model:
    """A copy of a functional `model` whose `Conv2D` layers are `FastConv2D`, same weights."""

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        if type(layer) is keras.layers.Conv2D:
            return FastConv2D.from_config(layer.get_config())
        return layer.__class__.from_config(layer.get_config())

    copy = keras.models.clone_model(model, clone_function=clone)
    copy.set_weights(model.get_weights())
    return copy
