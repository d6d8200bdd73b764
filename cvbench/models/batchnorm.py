"""`FusedBatchNormalization`: the batch norm of every cvbench builder
(`keras.layers.BatchNormalization`, computed by TensorFlow's fused kernel on a CPU).

Keras 3's `BatchNormalization` computes batch norm from separate operations on every backend:
the batch moments (`Mean`, `SquaredDifference`, `Mean`), then `x * inv + (beta - mean * inv)`,
in float32 even under a mixed policy, and its gradient is autodiff of those (`Sum`, `Tile`,
`Mul`, ...). On TensorFlow without XLA (the CPU path; XLA is slower there) that is a dozen
memory-bound passes over every activation per batch norm. In cvbench's ResNet-50 train step
they took a third of the step's time on one CPU thread (docs/benchmarks.md).
TensorFlow's `FusedBatchNormV3` does the same in one kernel forward and one backward (oneDNN's,
with the ReLU that follows fused in by TensorFlow's graph optimizer), reads bfloat16 input
directly and keeps its statistics in float32.

`FusedBatchNormalization` is `BatchNormalization` with that kernel where it applies:
TensorFlow backend without a GPU, a 4-D channels-last input, no mask, no renorm, not
synchronized, and, in training, a CPU where oneDNN runs its AVX-512 kernels
(`cvbench.models.layers.onednn_runs_avx512`). oneDNN's AVX2 kernel for a training forward
pass measured 5x slower than its AVX-512 one (about 18 ms against 3.5 ms for a 16x32x32x256
input, oneDNN capped at AVX2 on the same CPU; the backward pass 2.5 ms in both), and
ResNet-50's train step slower than with Keras' operations, so on AVX2 a training call runs
Keras' operations. An inference call takes the kernel on every CPU (TensorFlow's graph
optimizer folds it into the convolution before it). The results are Keras' up to float rounding:

- training: normalized with the batch's mean and population (biased) variance; the moving
  statistics are updated from them with `momentum` as Keras does (TensorFlow's kernel returns
  the Bessel-corrected variance, which is converted back: `* (n - 1) / n`, n the pixels per
  channel, 0 for n = 1 as Keras);
- inference (`training=False`, or a layer with `trainable=False`): normalized with the moving
  statistics;
- float32 variables only (the float32 policy and the mixed ones): float32 and bfloat16
  inputs go in as they are, float16 ones (`mixed_float16`) are computed in float32; the
  output has the layer's compute dtype. Under a policy whose variables are not float32
  (`float64`, `float16`, `bfloat16`) the layer is Keras' (the kernel's statistics are
  float32 only).

Everywhere else it is `keras.layers.BatchNormalization` unchanged: other backends (XLA on JAX
fuses batch norm itself), TensorFlow with a GPU (not measured here), other ranks and axes.
Its variables, weight files and config (plus `fused`) are `BatchNormalization`'s, and the
model files cvbench writes for users hold a plain `BatchNormalization` in its place
(`cvbench.utils.plain_keras.to_plain_keras`). This module imports TensorFlow only inside the
TensorFlow path.

`set_fused_batchnorm(model, False)` turns the fused kernel off in a built model (nested layers
included), to measure what it gains side by side.
"""

from __future__ import annotations

from typing import Any

import keras

from cvbench.models.layers import tensorflow_on_cpu_only, this_cpu_runs_avx512
from cvbench.utils.model_layers import switch_layers


@keras.saving.register_keras_serializable(package="cvbench")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` computed by TensorFlow's fused kernel where it
    applies (see the module docstring): same variables, results and config, plus `fused`.

    Args:
        *args: as `keras.layers.BatchNormalization` (`axis` first).
        fused: use the fused kernel where it applies (False: Keras' own operations).
        **kwargs: as `keras.layers.BatchNormalization`.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 3, 3, 4)).astype("float32")
        >>> fused, plain = FusedBatchNormalization(), keras.layers.BatchNormalization()
        >>> a, b = fused(x, training=True), plain(x, training=True)
        >>> bool(np.allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b),
        ...                  atol=1e-5))
        True
        >>> bool(np.allclose(keras.ops.convert_to_numpy(fused.moving_variance),
        ...                  keras.ops.convert_to_numpy(plain.moving_variance)))
        True
    """

    def __init__(self, *args: Any, fused: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(fused, bool):
            raise ValueError(f"fused must be a bool, got {fused!r}")
        self.fused = fused

    def uses_fused_kernel(
        self, input_rank: int = 4, *, masked: bool = False, training: bool = False
    ) -> bool:
        """Whether a call on an input of rank `input_rank` (with a mask or not; normalizing
        with the batch's statistics or not) runs TensorFlow's fused kernel."""
        axis = self.axis if isinstance(self.axis, int) else None
        return (
            self.fused
            and keras.config.backend() == "tensorflow"
            and not masked
            and input_rank == 4
            and axis in (-1, 3)
            and not self.renorm
            and not self.synchronized
            and keras.backend.standardize_dtype(self.variable_dtype) == "float32"
            and self.compute_dtype in ("float32", "bfloat16", "float16")
            and tensorflow_on_cpu_only()
            and (not training or fused_in_training())
        )

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        batch_statistics = bool(training and self.trainable)
        rank, masked = len(inputs.shape), mask is not None
        if not self.uses_fused_kernel(rank, masked=masked, training=batch_statistics):
            return super().call(inputs, training=training, mask=mask)
        import tensorflow as tf

        x = inputs if inputs.dtype in (tf.float32, tf.bfloat16) else tf.cast(inputs, tf.float32)
        channels = int(x.shape[-1])
        gamma = self.gamma if self.scale else tf.ones((channels,), tf.float32)
        beta = self.beta if self.center else tf.zeros((channels,), tf.float32)
        if batch_statistics:
            empty = tf.constant([], tf.float32)
            y, mean, corrected, *_ = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=gamma, offset=beta, mean=empty, variance=empty,
                epsilon=self.epsilon, data_format="NHWC", is_training=True,
            )  # fmt: skip
            shape = tf.shape(x)
            n = tf.cast(shape[0] * shape[1] * shape[2], tf.float32)
            variance = corrected * (tf.maximum(n - 1.0, 0.0) / tf.maximum(n, 1.0))
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + variance * (1.0 - m))
        else:
            y, *_ = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=gamma, offset=beta, mean=self.moving_mean,
                variance=self.moving_variance, epsilon=self.epsilon, data_format="NHWC",
                is_training=False,
            )  # fmt: skip
        return tf.cast(y, self.compute_dtype)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "fused": self.fused}


def fused_in_training() -> bool:
    """Whether a training call (batch statistics) takes the fused kernel on this CPU: where
    oneDNN runs its AVX-512 kernels (`cvbench.models.layers.this_cpu_runs_avx512`)."""
    return this_cpu_runs_avx512()


def set_fused_batchnorm(model: keras.Model, enabled: bool) -> keras.Model:
    """Turns `FusedBatchNormalization`'s fused kernel on or off in every layer of `model`,
    nested layers included, in place (before the model is compiled or traced).

    Args:
        model: a built model.
        enabled: True: the fused kernel where it applies; False: Keras' own operations.

    Returns:
        `model` (for chaining).

    Raises:
        ValueError: when `model` has no `FusedBatchNormalization` layer.
    """
    return switch_layers(model, FusedBatchNormalization, "fused", enabled)
