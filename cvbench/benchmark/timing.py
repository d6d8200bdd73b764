"""Timing primitives: throughput over windows of steps, latency percentiles per call.

Accelerators run asynchronously: a step returns as soon as its work is queued. Timing every
step therefore needs a host sync per step, which itself costs throughput (the queue drains
and the device idles while the host dispatches the next step). Throughput here is timed
over *windows* of several steps instead, with one sync at the end of each window: the
window's images over its wall time. Latency is the opposite question (how long one call
takes from the caller's side) and is timed call by call, each synced.

Everything is backend-agnostic: a workload is anything with `images_per_step`,
`first_step()` and `run(steps)` (see `Workload`); `block` waits for Keras tensors of any
backend, and other frameworks pass their own sync.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import keras
import numpy as np

from cvbench.training.throughput import summarize

#: Latency percentiles reported for every batch size.
PERCENTILES = (50, 90, 95, 99)


def block(tree: Any) -> None:
    """Waits until every tensor in `tree` (a nested structure) has been computed.

    JAX arrays are waited for in place; other tensors by copying one element of each to
    the host (which waits for the computation that produces it, without copying it all).
    """
    for leaf in keras.tree.flatten(tree):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
        elif hasattr(leaf, "shape") and len(leaf.shape) > 0:
            keras.ops.convert_to_numpy(keras.ops.reshape(leaf, (-1,))[:1])
        elif leaf is not None:
            keras.ops.convert_to_numpy(leaf)


class Workload(Protocol):
    """Something whose steps can be timed (a training loop, a forward pass...).

    `first_step` runs one step (compiling it first) and `run(steps)` runs `steps` more; both
    return only when the device has finished them.
    """

    images_per_step: int

    def first_step(self) -> None: ...

    def run(self, steps: int) -> None: ...


@dataclass(frozen=True)
class Throughput:
    """Images per second of one workload, measured over windows of steps.

    Attributes:
        images_per_sec: mean of the window rates.
        stderr: standard error of that mean (NaN with two windows or fewer).
        jitter: 1.4826 x median absolute deviation of the window rates.
        window_rates: images/s of each window.
        window_steps: steps per window.
        images_per_step: images in one step (all ranks).
        compile_seconds: wall time of the first step (tracing, compilation and one step).
        warmup_seconds: wall time of the other warm-up steps.
        warmup_steps: warm-up steps, the first one included.
        cpu_images_per_sec: images per second of this process' CPU time over the windows
            (all threads); on a shared machine it varies less with the load than the wall
            rate.
    """

    images_per_sec: float
    stderr: float
    jitter: float
    window_rates: tuple[float, ...]
    window_steps: int
    images_per_step: int
    compile_seconds: float
    warmup_seconds: float
    warmup_steps: int
    cpu_images_per_sec: float

    def format(self) -> str:
        """`Images/sec: mean +/- stderr (jitter = ...)`, the NVIDIA summary line."""
        return (
            f"Images/sec: {self.images_per_sec:.1f} +/- {self.stderr:.1f} "
            f"(jitter = {self.jitter:.1f})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        out = asdict(self)
        out["window_rates"] = list(self.window_rates)
        return out


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def measure_throughput(
    workloads: Mapping[str, Workload],
    *,
    warmup_steps: int,
    windows: int,
    window_steps: int,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
    on_window: Callable[[str, int, float], None] | None = None,
) -> dict[str, Throughput]:
    """Times several workloads side by side, alternating their windows.

    Each workload first runs `warmup_steps` steps (the first of them timed on its own as the
    compile time). Then window `w` of every workload runs in turn, the order rotating by one
    each window, so that a change in the machine's load affects all of them alike and their
    ratios stay meaningful on a shared machine.

    Example:
        >>> class Fake:
        ...     images_per_step = 8
        ...     def first_step(self): pass
        ...     def run(self, steps): pass
        >>> ticks = iter(range(100))
        >>> result = measure_throughput({"a": Fake()}, warmup_steps=2, windows=2,
        ...                             window_steps=4, clock=lambda: next(ticks),
        ...                             cpu_clock=lambda: 0.0)
        >>> result["a"].window_rates  # each window: 4 steps x 8 images / 1 tick
        (32.0, 32.0)

    Args:
        workloads: name -> workload.
        warmup_steps: unmeasured steps per workload (>= 1: the first compiles).
        windows: measured windows per workload.
        window_steps: steps per window.
        clock: wall clock (seconds).
        cpu_clock: this process' CPU time (seconds).
        on_window: called after each window with the workload's name, the 0-based window
            index and its images/s (progress lines).

    Returns:
        name -> `Throughput`, in the order of `workloads`.

    Raises:
        ValueError: for a non-positive count or no workloads.
    """
    _check_positive(warmup_steps=warmup_steps, windows=windows, window_steps=window_steps)
    if not workloads:
        raise ValueError("no workloads to measure")
    names = list(workloads)
    compile_s: dict[str, float] = {}
    warmup_s: dict[str, float] = {}
    for name in names:
        workload = workloads[name]
        start = clock()
        workload.first_step()
        middle = clock()
        if warmup_steps > 1:
            workload.run(warmup_steps - 1)
        compile_s[name], warmup_s[name] = middle - start, clock() - middle
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, float] = dict.fromkeys(names, 0.0)
    for w in range(windows):
        for name in names[w % len(names) :] + names[: w % len(names)]:
            workload = workloads[name]
            start, cpu_start = clock(), cpu_clock()
            workload.run(window_steps)
            seconds, cpu[name] = clock() - start, cpu[name] + cpu_clock() - cpu_start
            rates[name].append(window_steps * workload.images_per_step / max(seconds, 1e-12))
            if on_window is not None:
                on_window(name, w, rates[name][-1])
    results = {}
    for name in names:
        images = workloads[name].images_per_step
        summary = summarize(rates[name], global_batch=images)
        total_images = windows * window_steps * images
        results[name] = Throughput(
            images_per_sec=summary.mean,
            stderr=summary.stderr,
            jitter=summary.jitter,
            window_rates=tuple(rates[name]),
            window_steps=window_steps,
            images_per_step=images,
            compile_seconds=compile_s[name],
            warmup_seconds=warmup_s[name],
            warmup_steps=warmup_steps,
            cpu_images_per_sec=total_images / cpu[name] if cpu[name] > 0 else math.nan,
        )
    return results


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
    _check_positive(batch_size=batch_size, calls=calls)
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
