"""Inference latency: single synced calls timed one by one, and their percentiles.

Throughput (`cvbench.training.throughput`) times windows of steps with one sync per window;
latency is the opposite question (how long one call takes from the caller's side) and is
timed call by call, each synced.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: Latency percentiles reported for every batch size.
PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class Latency:
    """Wall time of single synced calls at one batch size.

    Attributes:
        batch_size: images per call.
        calls: timed calls (after the warm-up ones).
        mean_ms: mean latency in milliseconds.
        percentiles_ms: percentile -> latency in milliseconds (`PERCENTILES`; linear
            interpolation between the sorted samples, so with fewer than 100 calls p99 lies
            between the two slowest).
        images_per_sec: `batch_size / mean latency`.
        compile_seconds: wall time of the first call.
    """

    batch_size: int
    calls: int
    mean_ms: float
    percentiles_ms: dict[int, float]
    images_per_sec: float
    compile_seconds: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (percentile keys as "p50", ...)."""
        out = asdict(self)
        out["percentiles_ms"] = {f"p{p}": v for p, v in self.percentiles_ms.items()}
        return out


def latency_percentiles(samples_s: Sequence[float]) -> dict[int, float]:
    """`PERCENTILES` of latencies given in seconds, in milliseconds.

    Example:
        >>> latency_percentiles([0.001 * k for k in range(1, 11)])[90]  # 1..10 ms
        9.1

    (Linear interpolation: the 90th percentile of 10 sorted samples sits at index
    0.9 x 9 = 8.1, between 9 ms and 10 ms: 9.1 ms.)

    Raises:
        ValueError: for no samples.
    """
    x = np.asarray(samples_s, dtype=np.float64) * 1e3
    if x.size == 0:
        raise ValueError("no latency samples")
    return {p: round(float(np.percentile(x, p)), 6) for p in PERCENTILES}


def measure_latency(
    call: Callable[[], None],
    batch_size: int,
    *,
    warmup_calls: int,
    calls: int,
    clock: Callable[[], float] = time.perf_counter,
) -> Latency:
    """Times `calls` synced calls of `call()` after `warmup_calls` untimed ones.

    Args:
        call: runs one batch and returns once its results are on the host or ready.
        batch_size: images per call.
        warmup_calls: untimed calls after the first one (which compiles and is timed as
            `compile_seconds`).
        calls: timed calls.
        clock: wall clock (seconds).

    Raises:
        ValueError: for a non-positive count (`warmup_calls` may be 0).
    """
    for name, value in (("batch_size", batch_size), ("calls", calls)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if isinstance(warmup_calls, bool) or not isinstance(warmup_calls, int) or warmup_calls < 0:
        raise ValueError(f"warmup_calls must be an int >= 0, got {warmup_calls!r}")
    start = clock()
    call()
    compile_seconds = clock() - start
    for _ in range(warmup_calls):
        call()
    samples = []
    for _ in range(calls):
        start = clock()
        call()
        samples.append(clock() - start)
    mean = float(np.mean(samples))
    return Latency(
        batch_size=batch_size,
        calls=calls,
        mean_ms=mean * 1e3,
        percentiles_ms=latency_percentiles(samples),
        images_per_sec=batch_size / mean if mean > 0 else math.inf,
        compile_seconds=compile_seconds,
    )
