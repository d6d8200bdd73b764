"""What `TrainConfig(deterministic=True)` (`cvbench train --deterministic`) turns on, per backend.

Two runs of the same command with the same seed then write bit-identical checkpoints and
step losses (`tests/reliability/test_deterministic_runs.py`):

- TensorFlow: `tf.config.experimental.enable_op_determinism()` (its kernels and its XLA);
- JAX: XLA on the CPU is deterministic as it is (every device of
  `JAX_NUM_CPU_DEVICES=4` included). XLA on a GPU is not: it chooses convolution
  algorithms by timing them (autotuning), and reductions and scatters may accumulate with
  atomics, in whatever order the threads arrive. `--xla_gpu_deterministic_ops=true` in
  `XLA_FLAGS` makes it pick only deterministic kernels, and XLA reads `XLA_FLAGS` once,
  when JAX starts its backend (the first array, model or device query). So the flag must be
  set before that: `cvbench train --deterministic` sets it before Keras starts; in Python,
  call `request_deterministic_xla()` at the top of the script (or set the variable), since
  building a model starts the backend. A Trainer with `deterministic=True` on a JAX GPU
  whose `XLA_FLAGS` lack the flag raises `RuntimeError` saying so, instead of training
  nondeterministically.

Nothing here starts JAX's backend before the flag is set: importing Keras or JAX does not
start it (a first array or device query does), so the CLI can call `request_deterministic_xla`
after Keras is imported with `--backend jax`, and the Trainer before its distribution.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: The XLA option that makes XLA:GPU use deterministic kernels only.
XLA_DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"


def _has_flag(xla_flags: str) -> bool:
    return XLA_DETERMINISTIC_FLAG in xla_flags.split()


def request_deterministic_xla(environ: MutableMapping[str, str] | None = None) -> bool:
    """Adds `--xla_gpu_deterministic_ops=true` to `XLA_FLAGS`, keeping the flags already
    there. It takes effect only if JAX has not started its backend yet (XLA reads the
    variable once); TensorFlow's XLA reads it too, and `enable_op_determinism` asks for the
    same. Returns whether the variable changed.

    >>> env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    >>> request_deterministic_xla(env), env["XLA_FLAGS"]
    (True, '--xla_force_host_platform_device_count=4 --xla_gpu_deterministic_ops=true')
    >>> request_deterministic_xla(env)
    False
    """
    environ = os.environ if environ is None else environ
    flags = environ.get("XLA_FLAGS", "")
    if _has_flag(flags):
        return False
    environ["XLA_FLAGS"] = f"{flags} {XLA_DETERMINISTIC_FLAG}".strip()
    return True


def _jax_backend_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # another JAX layout: assume it has started
        return True


def enable_determinism(backend: str) -> None:
    """Makes the `backend`'s training steps deterministic, or says why it cannot. Safe to
    call before `jax.distributed` starts: while JAX's backend has not started, it only sets
    the flag (no device is queried).

    Raises:
        RuntimeError: JAX runs on a GPU and its `XLA_FLAGS` did not carry
            `--xla_gpu_deterministic_ops=true` when it started.
    """
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    elif backend == "jax":
        if not _jax_backend_started():
            request_deterministic_xla()  # XLA reads it when the backend starts
            return
        import jax

        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        if gpus and not _has_flag(os.environ.get("XLA_FLAGS", "")):
            raise RuntimeError(
                f"deterministic training on JAX with {gpus[0].device_kind} needs XLA_FLAGS="
                f"{XLA_DETERMINISTIC_FLAG} before JAX starts (XLA:GPU otherwise picks kernels "
                "by timing and sums with atomics): set the variable, or call "
                "cvbench.training.request_deterministic_xla() at the top of the script "
                "(cvbench train --deterministic does it)"
            )
