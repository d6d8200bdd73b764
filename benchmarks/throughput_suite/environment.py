"""Where a benchmark ran: date, command, backend, versions, devices and machine load."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import sys
from typing import Any

import keras

from cvbench.utils.cpu import SPEED_FLAGS, cpu_flags, cpu_model, describe_cpu

_PACKAGES = ("keras", "jax", "jaxlib", "tensorflow", "tensorflow-cpu", "torch", "torchvision")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def accelerators() -> list[str]:
    """The active backend's devices, without importing another framework.

    JAX: `jax.devices()`; TensorFlow: its GPUs; others: none listed.
    """
    backend = keras.config.backend()
    if backend == "jax":
        import jax

        return [f"{d.platform}:{getattr(d, 'device_kind', '')}" for d in jax.devices()]
    if backend == "tensorflow":
        import tensorflow as tf

        return [d.name for d in tf.config.list_physical_devices("GPU")] or ["cpu"]
    return []


def describe_environment(argv: list[str] | None = None) -> dict[str, Any]:
    """A JSON-ready description of this run's environment.

    Args:
        argv: the command line (default `sys.argv`).
    """
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    model, flags = cpu_model(), cpu_flags()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(argv if argv is not None else sys.argv),
        "backend": keras.config.backend(),
        "devices": accelerators(),
        "cpu": model,
        "cpu_flags": sorted(set(SPEED_FLAGS) & flags),
        "cpu_line": describe_cpu(model=model, flags=flags),
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "python": platform.python_version(),
        "versions": {p: v for p in _PACKAGES if (v := _version(p)) is not None},
    }
