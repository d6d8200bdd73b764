"""Precision policies: which one to use, building a model under it, loss scaling.

- "mixed_float16": float16 compute, float32 variables, dynamic loss scaling
  (`keras.optimizers.LossScaleOptimizer`).
- "mixed_bfloat16": bfloat16 compute, float32 variables, no loss scaling (bfloat16 has
  float32's exponent range).
- "float32": everything in float32.
- "auto": "mixed_float16" when the backend sees a GPU (NVIDIA's AMP recipes), otherwise
  "mixed_bfloat16" (fast on CPUs; float16 has no fast CPU kernels).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator

import keras

from cvbench.training.config import canonical_precision


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


def resolve_precision(precision: str, *, has_gpu: bool | None = None) -> str:
    """Returns the Keras dtype-policy name for `precision`.

    Args:
        precision: "mixed_float16" / "fp16", "mixed_bfloat16" / "bf16", "float32" / "fp32"
            or "auto".
        has_gpu: whether a GPU is available (detected when None).

    Returns:
        One of "mixed_float16", "mixed_bfloat16", "float32".

    Raises:
        ValueError: for an unknown precision.
    """
    name = canonical_precision(precision)
    if has_gpu is None and name in ("auto", "mixed_float16"):
        has_gpu = backend_has_gpu()
    if name == "auto":
        return "mixed_float16" if has_gpu else "mixed_bfloat16"
    if name == "mixed_float16" and not has_gpu:
        warnings.warn(
            "precision mixed_float16 without a GPU: float16 has no fast CPU kernels and runs "
            "far slower than float32; mixed_bfloat16 is the fast choice on CPU",
            stacklevel=2,
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
    found = {
        layer.dtype_policy.name
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if layer.weights
    }
    if found and policy not in found:
        raise ValueError(
            f"the model's layers use dtype policies {sorted(found)} but precision is "
            f"{policy!r}: pass a function that builds the model instead, so that the Trainer "
            "creates the layers under the policy"
        )
