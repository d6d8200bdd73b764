"""`FastConv2D`: the convolution of every cvbench builder (`keras.layers.Conv2D`, faster
gradients on TensorFlow without a GPU).

On TensorFlow's CPU kernels, `Conv2DBackpropInput` (the gradient of a convolution with
respect to its input) runs slower, up to several times, than a forward convolution doing
the same arithmetic, worst on small feature maps (ResNet-50's last stage), and
`Conv2DBackpropFilter` (the kernel gradient) is also slower than its arithmetic needs. For a
stride-1 convolution with an odd kernel and "same" padding (or any 1x1 convolution):

- the input gradient *is* a forward convolution: the output gradient convolved, with "same"
  padding, by the kernel flipped in space with its input and output channels swapped;
- the kernel gradient is one matrix product per kernel tap: `shifted_x^T g` over all pixels,
  `shifted_x` the input shifted by the tap's offset (zeros outside).

A strided 1x1 convolution is a stride-1 one on the subsampled input `x[:, ::s, ::s]`.
`FastConv2D` computes those gradients that way (`tf.custom_gradient`): the same values up to
float rounding. Which convolutions take that path depends on the CPU
(`fast_gradient_kinds`): on a CPU with AVX-512, whose oneDNN backward kernels are not the slow
ones, only stride-1 1x1 convolutions (a kernel gradient that is one matrix product); there
the k x k and strided 1x1 rewritings cost more than they save (the tap slices' copies, the
subsampling's gradient scatter), in float32 and bfloat16 alike. On other CPUs (AVX2) all of
the above. Everywhere else it is `keras.layers.Conv2D` unchanged: strided, dilated,
grouped, even-sized or "valid" k x k convolutions, other backends (XLA on JAX has no such
slow kernels), TensorFlow with a GPU (cuDNN's kernels), and any call that no gradient tape
records (`gradients_recorded`: inference runs Conv2D's own operation, which TensorFlow's
graph optimizer fuses with what follows). Its variables, config (plus
`fast_gradients`), outputs and weight files are Conv2D's; this module imports TensorFlow only
inside the TensorFlow path.

`set_fast_gradients(model, False)` turns the fast path off in a built model (nested layers
included), to measure what it gains side by side.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection
from typing import Any

import keras

from cvbench.utils.cpu import cpu_flags
from cvbench.utils.model_layers import switch_layers


@functools.cache
def tensorflow_on_cpu_only() -> bool:
    """Whether TensorFlow sees no GPU (on GPUs cuDNN's gradient kernels are not the slow ones).

    Imports TensorFlow: call it only on the TensorFlow backend.
    """
    import tensorflow as tf

    return not tf.config.list_logical_devices("GPU")


#: What `fast_gradient_kinds` answers: fast gradients for stride-1 1x1 convolutions only, or
#: for every convolution the module docstring lists.
POINTWISE = "pointwise"
ALL = "all"


def fast_gradient_kinds(
    flags: Collection[str] | None = None, *, onednn_max_isa: str | None = None
) -> str:
    """Which convolutions take `FastConv2D`'s fast gradients on a CPU with these flags:
    `POINTWISE` (stride-1 1x1 only) where oneDNN runs its AVX-512 kernels (`avx512f` in the
    flags and no `ONEDNN_MAX_CPU_ISA` cap below AVX-512: oneDNN's AVX-512 backward kernels,
    against which the k x k and strided rewritings measured slower in ResNet-50's train step,
    docs/benchmarks.md), `ALL` elsewhere (on AVX2 they measured 1.19x faster for ResNet-50).

    The cap matters because it chooses the kernels: an AVX-512 CPU with oneDNN capped at AVX2
    (`ONEDNN_MAX_CPU_ISA=AVX2`, as `benchmarks/cpu_check.py --emulate-avx2` runs it) runs the
    AVX2 kernels, and so takes what an AVX2 CPU takes.

    Example:
        >>> fast_gradient_kinds({"avx2", "avx512f", "avx512_bf16"}), fast_gradient_kinds({"avx2"})
        ('pointwise', 'all')
        >>> fast_gradient_kinds({"avx2", "avx512f"}, onednn_max_isa="AVX2")
        'all'

    Args:
        flags: the CPU's feature flags; None: this machine's (`cvbench.utils.cpu.cpu_flags`)
            and its oneDNN cap (the environment's `ONEDNN_MAX_CPU_ISA`, or its older name
            `DNNL_MAX_CPU_ISA`).
        onednn_max_isa: oneDNN's ISA cap (a `ONEDNN_MAX_CPU_ISA` value, any case); None or
            "ALL": no cap.
    """
    if flags is None:
        return _this_cpu_kinds()
    return POINTWISE if onednn_runs_avx512(flags, onednn_max_isa=onednn_max_isa) else ALL


def onednn_runs_avx512(flags: Collection[str], *, onednn_max_isa: str | None = None) -> bool:
    """Whether oneDNN runs its AVX-512 kernels on a CPU with these `flags` under the ISA cap
    `onednn_max_isa` (a `ONEDNN_MAX_CPU_ISA` value; None or "ALL": no cap): `avx512f` in the
    flags and no cap below AVX-512. Which of cvbench's CPU speed changes pay depends on it
    (`fast_gradient_kinds`, `cvbench.models.batchnorm`).

    Example:
        >>> onednn_runs_avx512({"avx2", "avx512f"}), onednn_runs_avx512({"avx2"})
        (True, False)
        >>> onednn_runs_avx512({"avx2", "avx512f"}, onednn_max_isa="AVX2")
        False
    """
    return "avx512f" in flags and _cap_allows_avx512(onednn_max_isa)


@functools.cache
def this_cpu_runs_avx512() -> bool:
    """`onednn_runs_avx512` for this machine's flags and this process's oneDNN cap."""
    return onednn_runs_avx512(cpu_flags(), onednn_max_isa=onednn_cap())


def _cap_allows_avx512(cap: str | None) -> bool:
    """Whether oneDNN capped at `cap` (a `ONEDNN_MAX_CPU_ISA` value) may run AVX-512 kernels:
    no cap, "ALL", or an AVX-512 / AVX10 level (oneDNN's names: SSE41, AVX, AVX2, AVX2_VNNI,
    AVX2_VNNI_2 are below it)."""
    if cap is None or not cap.strip():
        return True
    cap = cap.strip().upper()
    return cap == "ALL" or cap.startswith(("AVX512", "AVX10"))


def onednn_cap() -> str | None:
    """oneDNN's ISA cap in this process's environment: `ONEDNN_MAX_CPU_ISA`, or its older
    name `DNNL_MAX_CPU_ISA`; None when neither is set."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")


@functools.cache
def _this_cpu_kinds() -> str:
    return fast_gradient_kinds(cpu_flags(), onednn_max_isa=onednn_cap())


def gradients_recorded() -> bool:
    """Whether a TensorFlow gradient tape records what runs now (eagerly or in a function
    being traced).

    The fast gradients matter only to a call that is differentiated: a call no tape records
    (inference, `predict`, `evaluate`, an exported forward pass) runs Conv2D's own operation,
    without the custom-gradient wrapper, whose identity operations keep TensorFlow's graph
    optimizer from fusing the convolution with what follows it, and without a strided 1x1
    convolution's subsampling copy. Keras' and cvbench's train steps trace the forward pass
    under a tape, so they keep the fast gradients. Imports TensorFlow: call it only on the
    TensorFlow backend.

    Example:
        >>> import tensorflow as tf
        >>> with tf.GradientTape():
        ...     recorded = gradients_recorded()
        >>> recorded, gradients_recorded()
        (True, False)
    """
    from tensorflow.python.eager import record  # TensorFlow has no public spelling

    return record.could_possibly_record()


def _filter_gradient(x: Any, g: Any, kh: int, kw: int) -> Any:
    """The kernel gradient of a stride-1 "same" convolution with an odd `kh x kw` kernel.

    Args:
        x: the input, `(B, H, W, C)`.
        g: the output gradient, `(B, H, W, O)`, same dtype as `x`.
        kh: kernel height (odd).
        kw: kernel width (odd).

    Returns:
        `(kh, kw, C, O)` in `x`'s dtype: for each tap `(i, j)`, the matrix product over all
        pixels of the input shifted by `(i - kh // 2, j - kw // 2)` (zero-padded) and `g`.
        float16 is accumulated in float32 (CPU float16 products may accumulate in float16).
    """
    import tensorflow as tf

    dtype = x.dtype
    if dtype == tf.float16:
        x, g = tf.cast(x, tf.float32), tf.cast(g, tf.float32)
    c, o = x.shape[-1], g.shape[-1]
    h, w = tf.shape(x)[1], tf.shape(x)[2]
    padded = tf.pad(x, [[0, 0], [kh // 2, kh // 2], [kw // 2, kw // 2], [0, 0]])
    g = tf.reshape(g, [-1, o])
    taps = [
        tf.matmul(tf.reshape(padded[:, i : i + h, j : j + w, :], [-1, c]), g, transpose_a=True)
        for i in range(kh)
        for j in range(kw)
    ]
    return tf.cast(tf.reshape(tf.stack(taps), [kh, kw, c, o]), dtype)


def conv2d_fast_gradients(x: Any, kernel: Any) -> Any:
    """Stride-1 "same" convolution (odd kernel sizes) with forward-convolution gradients.

    Args:
        x: `(B, H, W, C)` TensorFlow tensor.
        kernel: `(kh, kw, C, O)`, kh and kw odd, the dtype of `x`.

    Returns:
        `(B, H, W, O)`, `tf.nn.conv2d(x, kernel, 1, "SAME")`; its gradients with respect to
        `x` and `kernel` have their dtypes.

    Raises:
        ValueError: for an even kernel size.
    """
    import tensorflow as tf

    kh, kw = int(kernel.shape[0]), int(kernel.shape[1])
    if kh % 2 == 0 or kw % 2 == 0:
        raise ValueError(f"the kernel must have odd height and width, got {kh}x{kw}")

    @tf.custom_gradient
    def conv(x, kernel):
        y = tf.nn.conv2d(x, kernel, 1, "SAME")

        def grad(g):
            flipped = tf.transpose(tf.reverse(kernel, [0, 1]), [0, 1, 3, 2])
            gx = tf.nn.conv2d(g, flipped, 1, "SAME")
            return gx, _filter_gradient(x, g, kh, kw)

        return y, grad

    return conv(tf.convert_to_tensor(x), tf.convert_to_tensor(kernel))


@keras.saving.register_keras_serializable(package="cvbench")
class FastConv2D(keras.layers.Conv2D):
    """`keras.layers.Conv2D` with forward-convolution gradients where they apply (see the
    module docstring): same variables, outputs and config, plus `fast_gradients`.

    Args:
        *args: as `keras.layers.Conv2D`.
        fast_gradients: use the fast gradients where they apply (False: Conv2D's own).
        **kwargs: as `keras.layers.Conv2D`.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 5, 5, 3)).astype("float32")
        >>> fast = FastConv2D(4, 3, padding="same", kernel_initializer="ones")
        >>> plain = keras.layers.Conv2D(4, 3, padding="same", kernel_initializer="ones")
        >>> bool(np.allclose(keras.ops.convert_to_numpy(fast(x)),
        ...                  keras.ops.convert_to_numpy(plain(x)), atol=1e-5))
        True
    """

    def __init__(self, *args: Any, fast_gradients: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(fast_gradients, bool):
            raise ValueError(f"fast_gradients must be a bool, got {fast_gradients!r}")
        self.fast_gradients = fast_gradients

    def uses_fast_gradients(self, input_rank: int = 4, *, kinds: str | None = None) -> bool:
        """Whether a call on an input of rank `input_rank` takes the fast path.

        Args:
            input_rank: the rank of the call's input.
            kinds: `POINTWISE` or `ALL` (see `fast_gradient_kinds`); None: this CPU's.
        """
        kh, kw = self.kernel_size
        stride_1 = tuple(self.strides) == (1, 1)
        one_by_one = kh == kw == 1  # any stride: a strided 1x1 convolution reads x[:, ::s, ::s]
        odd_same = self.padding == "same" and kh % 2 == 1 and kw % 2 == 1 and stride_1
        if not (
            self.fast_gradients
            and keras.config.backend() == "tensorflow"
            and self.data_format == "channels_last"
            and tuple(self.dilation_rate) == (1, 1)
            and self.groups == 1
            and input_rank == 4
            and (one_by_one or odd_same)
            and tensorflow_on_cpu_only()
        ):
            return False
        kinds = fast_gradient_kinds() if kinds is None else kinds
        if kinds not in (POINTWISE, ALL):
            raise ValueError(f"kinds must be {POINTWISE!r} or {ALL!r}, got {kinds!r}")
        return kinds == ALL or (one_by_one and stride_1)

    def convolution_op(self, inputs: Any, kernel: Any) -> Any:
        if not (self.uses_fast_gradients(len(inputs.shape)) and gradients_recorded()):
            return super().convolution_op(inputs, kernel)
        sh, sw = self.strides
        if (sh, sw) != (1, 1):  # 1x1: the stride-1 convolution of the subsampled input
            inputs = inputs[:, ::sh, ::sw, :]
        return conv2d_fast_gradients(inputs, kernel)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "fast_gradients": self.fast_gradients}


def set_fast_gradients(model: keras.Model, enabled: bool) -> keras.Model:
    """Turns `FastConv2D`'s fast gradients on or off in every layer of `model`, nested
    layers included, in place (before the model is compiled or traced).

    Args:
        model: a built model.
        enabled: True: the fast path where it applies; False: `keras.layers.Conv2D`'s own.

    Returns:
        `model` (for chaining).

    Raises:
        ValueError: when `model` has no `FastConv2D` layer.
    """
    return switch_layers(model, FastConv2D, "fast_gradients", enabled)
