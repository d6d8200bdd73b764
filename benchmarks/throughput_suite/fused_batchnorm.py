"""Prototype: Keras batch norm computed by TensorFlow's fused kernel (a speed change to try).

Keras 3's `BatchNormalization` computes batch norm from separate operations on every
backend (moments, then `x * inv + offset`; its gradient from autodiff of those), in float32
even under a mixed policy. On TensorFlow without XLA (the CPU path: XLA is slower there)
that is several memory-bound passes over every activation, forward and backward.
`FusedBatchNormalization` is a drop-in subclass (same variables, config and results) whose
`call` uses TensorFlow's `FusedBatchNormV3` (one kernel forward, one backward, bfloat16 /
float16 inputs with float32 statistics) when it can: TensorFlow backend, 4-D channels-last
input, no mask, no renorm, not synchronized. Otherwise it is Keras' layer.

Measured on a 2-core AVX2 CPU it gains nothing worth taking (docs/benchmarks.md, "What each
speed change gained"), so the model builders keep Keras' layer; it stays here as a prototype
that `benchmarks/train_throughput.py --variants fused_batchnorm` measures beside cvbench
(`with_fused_batchnorm` swaps it into a built model).
"""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="cvbench")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` with TensorFlow's fused kernel where it applies.

    The moving variance is updated with the population (biased) batch variance, as Keras
    does (TensorFlow's kernel returns the Bessel-corrected one, which is converted back).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 3, 3, 4)).astype("float32")
        >>> fused, plain = FusedBatchNormalization(), keras.layers.BatchNormalization()
        >>> a, b = fused(x, training=True), plain(x, training=True)
        >>> bool(np.allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b),
        ...                  atol=1e-5))
        True
    """

    def _fusable(self, inputs, mask) -> bool:
        axis = self.axis if isinstance(self.axis, int) else None
        return (
            keras.config.backend() == "tensorflow"
            and mask is None
            and len(inputs.shape) == 4
            and axis in (-1, 3)
            and not self.renorm
            and not self.synchronized
            and self.epsilon >= 1.001e-5  # the fused kernel's smallest epsilon
        )

    def call(self, inputs, training=None, mask=None):
        if not self._fusable(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        import tensorflow as tf

        channels = inputs.shape[-1]
        gamma = self.gamma if self.scale else tf.ones((channels,), "float32")
        beta = self.beta if self.center else tf.zeros((channels,), "float32")
        x = inputs if inputs.dtype in (tf.float16, tf.bfloat16) else tf.cast(inputs, "float32")
        if training and self.trainable:
            y, mean, corrected = tf.compat.v1.nn.fused_batch_norm(
                x, gamma, beta, epsilon=self.epsilon, data_format="NHWC", is_training=True
            )
            count = tf.cast(tf.size(x) // channels, "float32")
            variance = corrected * tf.maximum(count - 1.0, 0.0) / count
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + variance * (1.0 - m))
        else:
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                x,
                gamma,
                beta,
                mean=self.moving_mean,
                variance=self.moving_variance,
                epsilon=self.epsilon,
                data_format="NHWC",
                is_training=False,
            )
        return tf.cast(y, self.compute_dtype)


def with_fused_batchnorm(model: keras.Model) -> keras.Model:
    """A copy of a functional `model` whose batch norms are `FusedBatchNormalization`, with
    the same weights (subclasses of `BatchNormalization` are left as they are)."""

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        if type(layer) is keras.layers.BatchNormalization:
            return FusedBatchNormalization.from_config(layer.get_config())
        return layer.__class__.from_config(layer.get_config())

    copy = keras.models.clone_model(model, clone_function=clone)
    copy.set_weights(model.get_weights())
    return copy
