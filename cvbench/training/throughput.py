"""Throughput measurement: windows of steps, timed side by side, summarized as NVIDIA does.

Accelerators run asynchronously: a step returns as soon as its work is queued. Timing every
step therefore needs a host sync per step, which itself costs throughput (the queue drains
and the device idles while the host dispatches the next step). `measure_throughput` times
*windows* of steps instead, with one sync at the end of each window: the window's images
over its wall time. A window of one step is a step timed on its own (`Trainer.benchmark`);
`cvbench benchmark` and the benchmark suite use windows of several steps.

Everything is backend-agnostic: a workload is anything with `images_per_step`,
`first_step()` and `run(steps)` (see `Workload`); `block` waits for Keras tensors of any
backend, and other frameworks pass their own sync.

The statistics and lines are those of NVIDIA's Horovod benchmark script. Every logged step
prints `step epoch img/s loss lr` (`%6i %5i %7.1f %7.3f %7.5f`, step and epoch counted from
1, img/s over all ranks). At the end, over the measured steps (or windows):

    Images/sec: <mean> +/- <standard error> (jitter = <1.4826 x MAD>)

with the standard error `std(ddof=1) / sqrt(n)` (NaN for n <= 2, as in that script) and the
jitter the median absolute deviation scaled by 1.4826 (a standard deviation for normal data).
With too few steps for a standard error the line says so instead of printing `+/- nan`:
`Images/sec: <mean> (one window: no spread)`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import keras
import numpy as np

STEP_HEADER = "  Step Epoch Img/sec   Loss   LR"


def format_step_line(step: int, epoch: int, images_per_sec: float, loss: float, lr: float) -> str:
    """One progress line; `step` and `epoch` are 1-based."""
    return f"{step:6d} {epoch:5d} {images_per_sec:7.1f} {loss:7.3f} {lr:7.5f}"


def format_summary(mean: float, stderr: float, jitter: float, *, count: int, unit: str) -> str:
    """NVIDIA's summary line `Images/sec: mean +/- stderr (jitter = ...)`, or, with too few
    rates for a standard error (NaN with two or fewer), what the mean is over instead.

    Args:
        mean: images/s.
        stderr: standard error of the mean (NaN: too few rates).
        jitter: 1.4826 x median absolute deviation of the rates.
        count: number of rates the mean is over.
        unit: what a rate is of, singular ("step" or "window").

    Example:
        >>> format_summary(1234.56, 3.25, 7.0, count=10, unit="window")
        'Images/sec: 1234.6 +/- 3.2 (jitter = 7.0)'
        >>> format_summary(1234.56, float("nan"), 0.0, count=1, unit="window")
        'Images/sec: 1234.6 (one window: no spread)'
        >>> format_summary(1234.56, float("nan"), 7.0, count=2, unit="step")
        'Images/sec: 1234.6 (2 steps: too few for a standard error; jitter = 7.0)'
    """
    if not math.isnan(stderr):
        return f"Images/sec: {mean:.1f} +/- {stderr:.1f} (jitter = {jitter:.1f})"
    if count <= 1:
        return f"Images/sec: {mean:.1f} (one {unit}: no spread)"
    return (
        f"Images/sec: {mean:.1f} ({count} {unit}s: too few for a standard error; "
        f"jitter = {jitter:.1f})"
    )


@dataclass(frozen=True)
class ThroughputSummary:
    """Images per second over the measured steps (all ranks together).

    Attributes:
        mean: mean of the per-step rates.
        stderr: standard error of the mean (NaN with <= 2 steps).
        jitter: 1.4826 x median absolute deviation of the per-step rates.
        steps: number of measured steps.
        global_batch: images per step over all ranks.
    """

    mean: float
    stderr: float
    jitter: float
    steps: int
    global_batch: int

    def format(self) -> str:
        """`Images/sec: mean +/- stderr (jitter = ...)` (see `format_summary`)."""
        return format_summary(self.mean, self.stderr, self.jitter, count=self.steps, unit="step")

    def to_dict(self) -> dict:
        """The fields as a dict (NaN kept as float('nan'))."""
        return asdict(self)


def summarize(rates: list[float] | np.ndarray, global_batch: int) -> ThroughputSummary:
    """Summarizes per-step images/s.

    Example:
        >>> s = summarize([100.0, 110.0, 90.0, 100.0], global_batch=8)
        >>> round(s.mean, 3), round(s.stderr, 3), round(s.jitter, 3)
        (100.0, 4.082, 7.413)

    (std with ddof=1 is sqrt(200/3) = 8.165, / sqrt(4) = 4.082; deviations from the median
    100 are 0, 10, 10, 0, median 5, x 1.4826 = 7.413.)

    Raises:
        ValueError: when `rates` is empty.
    """
    x = np.asarray(rates, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no steps to summarize (all were burn-in steps?)")
    stderr = float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 2 else float("nan")
    jitter = float(1.4826 * np.median(np.abs(x - np.median(x))))
    return ThroughputSummary(
        mean=float(np.mean(x)),
        stderr=stderr,
        jitter=jitter,
        steps=int(x.size),
        global_batch=int(global_batch),
    )


def images_per_second(seconds: float, images: int) -> float:
    """`images` over `seconds` (a step's wall time; a zero time counts as 1 ns).

    Example:
        >>> images_per_second(0.5, 64)
        128.0
    """
    return images / max(seconds, 1e-9)


class ThroughputMeter:
    """Collects per-step rates after a burn-in (`Trainer.fit`'s running throughput).

    Args:
        global_batch: images per step over all ranks.
        burn_in: steps (counted from the meter's creation) left out of the summary.
    """

    def __init__(self, global_batch: int, burn_in: int = 20) -> None:
        self.global_batch = int(global_batch)
        self.burn_in = int(burn_in)
        self.rates: list[float] = []
        self._seen = 0

    def record(self, seconds: float, images: int | None = None) -> float:
        """Records one step's wall time; returns its images/s.

        Args:
            seconds: the step's wall time.
            images: images in the step over all ranks (default `global_batch`).
        """
        images = self.global_batch if images is None else images
        rate = images_per_second(seconds, images)
        self._seen += 1
        if self._seen > self.burn_in:
            self.rates.append(rate)
        return rate

    def summary(self) -> ThroughputSummary | None:
        """The summary of the measured steps, or None when none passed the burn-in."""
        if not self.rates:
            return None
        return summarize(self.rates, self.global_batch)


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
        compile_seconds: wall time of the first step (tracing, compilation and one step);
            NaN without warm-up steps (the first window includes it).
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
        """`Images/sec: mean +/- stderr (jitter = ...)`, the NVIDIA summary line (see
        `format_summary` for one or two windows)."""
        return format_summary(
            self.images_per_sec,
            self.stderr,
            self.jitter,
            count=len(self.window_rates),
            unit="window",
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        out = asdict(self)
        out["window_rates"] = list(self.window_rates)
        return out


def _check_count(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        kind = "a positive int" if least == 1 else f"an int >= {least}"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def _run_steps(workload: Workload, steps: int, *, started: bool) -> None:
    """`steps` steps of `workload`, the first of them `first_step()` if none ran yet."""
    if not started:
        workload.first_step()
        steps -= 1
    if steps:
        workload.run(steps)


def _warm_up(
    workloads: Mapping[str, Workload], warmup_steps: int, clock: Callable[[], float]
) -> tuple[dict[str, float], dict[str, float]]:
    """`(compile seconds, warm-up seconds)` by name: each workload's first step (its
    compile) timed alone, then its other `warmup_steps - 1` steps; NaN and 0 without
    warm-up steps."""
    compile_s: dict[str, float] = dict.fromkeys(workloads, math.nan)
    warmup_s: dict[str, float] = dict.fromkeys(workloads, 0.0)
    for name in workloads if warmup_steps else ():
        workload = workloads[name]
        start = clock()
        workload.first_step()
        middle = clock()
        if warmup_steps > 1:
            workload.run(warmup_steps - 1)
        compile_s[name], warmup_s[name] = middle - start, clock() - middle
    return compile_s, warmup_s


def _timed_windows(
    workloads: Mapping[str, Workload],
    windows: int,
    window_steps: int,
    *,
    started: bool,
    clock: Callable[[], float],
    cpu_clock: Callable[[], float],
    on_window: Callable[[str, int, float], None] | None,
) -> tuple[dict[str, list[float]], dict[str, float], dict[str, int]]:
    """`(window rates, CPU seconds, images)` by name: `windows` windows of `window_steps`
    steps of every workload, the order rotating by one each window (`started`: the
    workloads have run their first step)."""
    names = list(workloads)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, float] = dict.fromkeys(names, 0.0)
    images: dict[str, int] = dict.fromkeys(names, 0)
    for w in range(windows):
        for name in names[w % len(names) :] + names[: w % len(names)]:
            workload = workloads[name]
            start, cpu_start = clock(), cpu_clock()
            _run_steps(workload, window_steps, started=started or w > 0)
            seconds, cpu[name] = clock() - start, cpu[name] + cpu_clock() - cpu_start
            images[name] += window_steps * workload.images_per_step
            rates[name].append(window_steps * workload.images_per_step / max(seconds, 1e-12))
            if on_window is not None:
                on_window(name, w, rates[name][-1])
    return rates, cpu, images


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
    ratios stay meaningful on a shared machine. A window's rate is its steps x the
    workload's `images_per_step` (read after the window) over its wall time.

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
        warmup_steps: unmeasured steps per workload, the first of which compiles; 0: none,
            the first window then starts with the compiling `first_step()` (and
            `compile_seconds` is NaN).
        windows: measured windows per workload.
        window_steps: steps per window.
        clock: wall clock (seconds).
        cpu_clock: this process' CPU time (seconds).
        on_window: called after each window with the workload's name, the 0-based window
            index and its images/s (progress lines); not timed.

    Returns:
        name -> `Throughput`, in the order of `workloads`.

    Raises:
        ValueError: for a negative warm-up, a non-positive count or no workloads.
    """
    _check_count("warmup_steps", warmup_steps, 0)
    _check_count("windows", windows, 1)
    _check_count("window_steps", window_steps, 1)
    if not workloads:
        raise ValueError("no workloads to measure")
    names = list(workloads)
    compile_s, warmup_s = _warm_up(workloads, warmup_steps, clock)
    rates, cpu, images = _timed_windows(
        workloads, windows, window_steps, started=warmup_steps > 0, clock=clock,
        cpu_clock=cpu_clock, on_window=on_window,
    )  # fmt: skip
    return {
        name: _throughput(
            rates[name], workloads[name].images_per_step, window_steps=window_steps,
            compile_seconds=compile_s[name], warmup_seconds=warmup_s[name],
            warmup_steps=warmup_steps, images=images[name], cpu_seconds=cpu[name],
        )
        for name in names
    }  # fmt: skip


def _throughput(
    rates: list[float],
    images_per_step: int,
    *,
    window_steps: int,
    compile_seconds: float,
    warmup_seconds: float,
    warmup_steps: int,
    images: int,
    cpu_seconds: float,
) -> Throughput:
    """One workload's `Throughput` from its window `rates` and timings."""
    summary = summarize(rates, global_batch=images_per_step)
    return Throughput(
        images_per_sec=summary.mean,
        stderr=summary.stderr,
        jitter=summary.jitter,
        window_rates=tuple(rates),
        window_steps=window_steps,
        images_per_step=summary.global_batch,
        compile_seconds=compile_seconds,
        warmup_seconds=warmup_seconds,
        warmup_steps=warmup_steps,
        cpu_images_per_sec=images / cpu_seconds if cpu_seconds > 0 else math.nan,
    )
