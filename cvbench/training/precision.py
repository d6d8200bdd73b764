"""Precision policies: which one to use, building a model under it, loss scaling.

- "mixed_float16": float16 compute, float32 variables, loss scaling: dynamic
  (`keras.optimizers.LossScaleOptimizer`) or static (`StaticLossScaleOptimizer`, NVIDIA
  DeepLearningExamples' `--static_loss_scale 128`); see `loss_scale_optimizer`.
- "mixed_bfloat16": bfloat16 compute, float32 variables, no loss scaling (bfloat16 has
  float32's exponent range).
- "float32": everything in float32.
- "auto": "mixed_float16" when the backend sees a GPU (NVIDIA's AMP recipes); on a CPU with
  bfloat16 instructions (`BF16_CPU_FLAGS`: AVX512-BF16 or AMX) "mixed_bfloat16"; on any
  other CPU "float32" (bfloat16 emulated with AVX2 trained ResNet-50 at 0.28x the float32
  rate, and float16 has no fast CPU kernels at all).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Collection, Iterator

import keras
from keras import ops

from cvbench.training.config import canonical_precision
from cvbench.utils.cpu import cpu_flags
from cvbench.utils.model_layers import all_layers

#: CPU feature flags (as /proc/cpuinfo names them) of native bfloat16 arithmetic.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")

# Warnings already given in this process (each is given once).
_WARNED: set[str] = set()


def cpu_has_fast_bfloat16(flags: Collection[str] | None = None) -> bool:
    """Whether the CPU computes bfloat16 natively (one of `BF16_CPU_FLAGS`).

    Args:
        flags: the CPU's feature flags (read with `cpu_flags()` when None).
    """
    flags = cpu_flags() if flags is None else flags
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, stacklevel=3)


def backend_has_gpu() -> bool:
    """Whether the active Keras backend sees a GPU (imports only that backend)."""
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    if backend == "jax":
        import jax

        return any(d.platform == "gpu" for d in jax.devices())
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    return False


def precision_reason(
    precision: str, *, has_gpu: bool | None = None, flags: Collection[str] | None = None
) -> str:
    """Why `resolve_precision(precision)` gives what it gives, for the run's banner.

    Example:
        >>> precision_reason("auto", has_gpu=False, flags={"avx2", "amx_bf16"})
        'auto: this CPU has native bfloat16 (amx_bf16)'
        >>> precision_reason("auto", has_gpu=False, flags={"avx2"})
        'auto: no GPU, and this CPU has no native bfloat16 (avx512_bf16, amx_bf16)'
        >>> precision_reason("fp32")
        'asked'
    """
    if canonical_precision(precision) != "auto":
        return "asked"
    if has_gpu is None:
        has_gpu = backend_has_gpu()
    if has_gpu:
        return "auto: a GPU"
    flags = cpu_flags() if flags is None else flags
    native = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    if native:
        return f"auto: this CPU has native bfloat16 ({', '.join(native)})"
    return f"auto: no GPU, and this CPU has no native bfloat16 ({', '.join(BF16_CPU_FLAGS)})"


def resolve_precision(
    precision: str, *, has_gpu: bool | None = None, flags: Collection[str] | None = None
) -> str:
    """Returns the Keras dtype-policy name for `precision`.

    "auto" is "mixed_float16" with a GPU, "mixed_bfloat16" on a CPU with native bfloat16
    (`BF16_CPU_FLAGS`) and "float32" on other CPUs. A precision that is slow where it runs
    is honoured with a warning, given once per process: "mixed_float16" without a GPU,
    "mixed_bfloat16" on a CPU without native bfloat16.

    Example:
        >>> resolve_precision("auto", has_gpu=False, flags={"avx2", "amx_bf16"})
        'mixed_bfloat16'
        >>> resolve_precision("auto", has_gpu=False, flags={"avx2"})
        'float32'

    Args:
        precision: "mixed_float16" / "fp16", "mixed_bfloat16" / "bf16", "float32" / "fp32"
            or "auto".
        has_gpu: whether a GPU is available (detected when None).
        flags: the CPU's feature flags (read from /proc/cpuinfo when None and needed).

    Returns:
        One of "mixed_float16", "mixed_bfloat16", "float32".

    Raises:
        ValueError: for an unknown precision.
    """
    name = canonical_precision(precision)
    if name == "float32":
        return name
    if has_gpu is None:
        has_gpu = backend_has_gpu()
    if name == "auto":
        if has_gpu:
            return "mixed_float16"
        return "mixed_bfloat16" if cpu_has_fast_bfloat16(flags) else "float32"
    if name == "mixed_float16" and not has_gpu:
        _warn_once(
            name,
            "precision mixed_float16 without a GPU: float16 has no fast CPU kernels and runs "
            "far slower than float32, the fast choice on this CPU",
        )
    if name == "mixed_bfloat16" and not has_gpu and not cpu_has_fast_bfloat16(flags):
        _warn_once(
            name,
            "precision mixed_bfloat16 on a CPU without native bfloat16 (none of "
            f"{', '.join(BF16_CPU_FLAGS)}): bfloat16 is emulated and runs several times slower "
            "than float32, the fast choice on this CPU",
        )
    return name


@contextlib.contextmanager
def dtype_policy_scope(policy: str) -> Iterator[None]:
    """Sets Keras' global dtype policy inside the block and restores the previous one."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_model_with_policy(builder: Callable[[], keras.Model], policy: str) -> keras.Model:
    """Calls `builder()` with `policy` in force, so its layers are created under it.

    Raises:
        ValueError: if `builder` does not return a `keras.Model`.
    """
    with dtype_policy_scope(policy):
        model = builder()
    if not isinstance(model, keras.Model):
        raise ValueError(f"the model builder must return a keras.Model, got {type(model)!r}")
    return model


def check_model_policy(model: keras.Model, policy: str) -> None:
    """Checks that the layers holding weights were created under `policy`.

    A final float32 layer (logits) is fine: the policy only has to be the one most layers use.

    Raises:
        ValueError: naming the policies found, when none of them is `policy`.
    """
    found = {layer.dtype_policy.name for layer in all_layers(model) if layer.weights}
    if found and policy not in found:
        raise ValueError(
            f"the model's layers use dtype policies {sorted(found)} but precision is "
            f"{policy!r}: pass a function that builds the model instead, so that the Trainer "
            "creates the layers under the policy"
        )


@keras.saving.register_keras_serializable(package="cvbench")
class StaticLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Loss scaling by a fixed factor: the loss times `scale`, the gradients divided by it.

    NVIDIA DeepLearningExamples' ResNet-50 recipes pass `--static_loss_scale 128`
    (TensorFlow/Classification/ConvNets, `utils/optimizers.py` `FixedLossScalerOptimizer`).
    That optimizer applies whatever gradients come out, so one overflow writes inf/NaN into
    the weights for good. Here, as under dynamic scaling, a step whose gradients are not finite
    is skipped (no variable changes; `iterations` does not advance, which is how the
    Trainer's whole-step check sees it) but the scale stays `scale`: it never halves or grows.

    It is a `keras.optimizers.LossScaleOptimizer` (same variables, so checkpoints keep their
    layout, and everything that looks for one, Horovod's gradient averaging included, finds
    it); the arithmetic uses the constant `scale`, not the `dynamic_scale` variable, so a
    checkpoint written under dynamic scaling cannot change it.

    Example:
        >>> inner = keras.optimizers.SGD(0.1)
        >>> opt = StaticLossScaleOptimizer(inner, scale=128.0)
        >>> float(opt.scale_loss(2.0))
        256.0

    Args:
        inner_optimizer: the optimizer that applies the unscaled gradients.
        scale: the loss scale, > 0.
        name: optimizer name.

    Raises:
        ValueError: for a scale that is not a finite number > 0.
    """

    def __init__(self, inner_optimizer, scale: float = 128.0, name: str | None = None, **kwargs):
        if (
            isinstance(scale, bool)
            or not isinstance(scale, (int, float))
            or not math.isfinite(scale)
            or scale <= 0
        ):
            raise ValueError(f"the static loss scale must be a finite number > 0, got {scale!r}")
        super().__init__(
            inner_optimizer, initial_scale=float(scale), dynamic_growth_steps=1, name=name, **kwargs
        )
        self.scale = float(scale)

    def scale_loss(self, loss):
        return ops.multiply(loss, self.scale)

    def _unscaled(self, grads, trainable_variables):
        return [
            g
            if g is None or self._overwrite_variable_with_gradient(v)
            else ops.divide(g, self.scale)
            for g, v in zip(grads, trainable_variables, strict=True)
        ]

    # The four handlers of keras' LossScaleOptimizer (keras 3 `loss_scale_optimizer.py`), with
    # the updates of the scale and its growth counter left out.
    def _stateful_handle_finite_grads(self, grads, trainable_variables):
        variables = trainable_variables or self._trainable_variables
        self.inner_optimizer.apply(
            self._unscaled(grads, variables), trainable_variables=trainable_variables
        )

    def _stateful_handle_non_finite_grads(self):
        return None

    def _stateless_handle_finite_grads(self, optimizer_variables, grads, trainable_variables):
        mapping = list(zip(self.variables, optimizer_variables, strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            new_trainable, new_inner = self.inner_optimizer.stateless_apply(
                self.inner_optimizer.variables,
                self._unscaled(grads, self._trainable_variables),
                trainable_variables,
            )
        own = list(optimizer_variables[: len(self._variables)])
        return list(new_trainable), own + list(new_inner)

    def _stateless_handle_non_finite_grads(self, optimizer_variables, trainable_variables):
        return list(trainable_variables), list(optimizer_variables)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["initial_scale"], config["dynamic_growth_steps"]
        config["scale"] = self.scale
        return config


def loss_scale_optimizer(
    optimizer: keras.optimizers.Optimizer,
    *,
    dynamic: bool,
    scale: float,
    growth_steps: int,
) -> keras.optimizers.LossScaleOptimizer:
    """Wraps `optimizer` in loss scaling for mixed_float16.

    Args:
        optimizer: the update rule.
        dynamic: True: `keras.optimizers.LossScaleOptimizer` starting at `scale`, halved on
            each non-finite step and doubled after `growth_steps` finite ones; False:
            `StaticLossScaleOptimizer(scale)`.
        scale: the initial (dynamic) or fixed (static) loss scale.
        growth_steps: finite steps before a dynamic scale doubles (unused when static).

    Returns:
        The wrapping optimizer; either kind skips a step whose gradients are not finite.

    Raises:
        ValueError: for `dynamic` not a bool, or a bad static scale.
    """
    if not isinstance(dynamic, bool):
        raise ValueError(f"dynamic must be True or False, got {dynamic!r}")
    if not dynamic:
        return StaticLossScaleOptimizer(optimizer, scale=scale)
    return keras.optimizers.LossScaleOptimizer(
        optimizer, initial_scale=scale, dynamic_growth_steps=growth_steps
    )
