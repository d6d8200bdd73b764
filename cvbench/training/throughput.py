"""Throughput measurement in the format of NVIDIA's Horovod benchmark script.

Every logged step prints `step epoch img/s loss lr` (`%6i %5i %7.1f %7.3f %7.5f`, step and
epoch counted from 1, img/s over all ranks). At the end, over the steps after the burn-in:

    Images/sec: <mean> +/- <standard error> (jitter = <1.4826 x MAD>)

with the standard error `std(ddof=1) / sqrt(n)` (NaN for n <= 2, as in that script) and the
jitter the median absolute deviation scaled by 1.4826 (a standard deviation for normal data).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

STEP_HEADER = "  Step Epoch Img/sec   Loss   LR"


def format_step_line(step: int, epoch: int, images_per_sec: float, loss: float, lr: float) -> str:
    """One progress line; `step` and `epoch` are 1-based."""
    return f"{step:6d} {epoch:5d} {images_per_sec:7.1f} {loss:7.3f} {lr:7.5f}"


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
        """`Images/sec: mean +/- stderr (jitter = ...)`."""
        return f"Images/sec: {self.mean:.1f} +/- {self.stderr:.1f} (jitter = {self.jitter:.1f})"

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


class ThroughputMeter:
    """Collects per-step rates after a burn-in.

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
        rate = images / max(seconds, 1e-9)
        self._seen += 1
        if self._seen > self.burn_in:
            self.rates.append(rate)
        return rate

    def summary(self) -> ThroughputSummary | None:
        """The summary of the measured steps, or None when none passed the burn-in."""
        if not self.rates:
            return None
        return summarize(self.rates, self.global_batch)
