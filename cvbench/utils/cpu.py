"""The CPU a process runs on: its model name and feature flags, as /proc/cpuinfo gives them.

A throughput figure is only comparable on the same kind of CPU: bfloat16 is native with
AVX512-BF16 or AMX and emulated (slowly) with AVX2 alone. Benchmarks print `describe_cpu()`
next to their figures; `training.precision` reads `cpu_flags()` to pick a precision.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Collection
from pathlib import Path

#: The flags that decide convolution and matmul speed, in the order `describe_cpu` lists them.
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16")

CPUINFO = "/proc/cpuinfo"


def _first_cpu(cpuinfo: str | Path) -> dict[str, str]:
    """`key: value` lines of the first processor block of `cpuinfo` (empty when unreadable)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: str | Path = CPUINFO) -> frozenset[str]:
    """The feature flags of the first CPU in `cpuinfo` (empty where there is no such file).

    Reads the `flags` line (x86) or the `Features` line (ARM).
    """
    fields = _first_cpu(cpuinfo)
    return frozenset(fields.get("flags", fields.get("Features", "")).split())


def cpu_model(cpuinfo: str | Path = CPUINFO) -> str:
    """The CPU's model name (`model name` in `cpuinfo`; the platform's processor elsewhere)."""
    name = _first_cpu(cpuinfo).get("model name")
    return name or platform.processor() or platform.machine()


def describe_cpu(
    *,
    model: str | None = None,
    flags: Collection[str] | None = None,
    cores: int | None = None,
) -> str:
    """One line naming the CPU, its core count and which of `SPEED_FLAGS` it has.

    Example:
        >>> describe_cpu(model="EPYC", flags={"fpu", "avx2"}, cores=2)
        'EPYC, 2 cores, flags: avx2 (no avx512f, avx512_vnni, avx512_bf16, avx512_fp16, amx_bf16)'
        >>> describe_cpu(model="Xeon", flags={"avx2", "avx512f", "amx_bf16"}, cores=8)
        'Xeon, 8 cores, flags: avx2 avx512f amx_bf16 (no avx512_vnni, avx512_bf16, avx512_fp16)'

    Args:
        model: the model name (read with `cpu_model()` when None).
        flags: the feature flags (read with `cpu_flags()` when None).
        cores: cores this process may use (its CPU affinity when None).
    """
    model = cpu_model() if model is None else model
    flags = cpu_flags() if flags is None else flags
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    has = [f for f in SPEED_FLAGS if f in flags]
    lacks = [f for f in SPEED_FLAGS if f not in flags]
    listed = " ".join(has) or "none of " + ", ".join(SPEED_FLAGS)
    line = f"{model}, {cores} core{'' if cores == 1 else 's'}, flags: {listed}"
    if has and lacks:
        line += f" (no {', '.join(lacks)})"
    return line
