"""What a benchmark run produces: throughput and latency results, JSON-ready."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cvbench.benchmark.latency import Latency
from cvbench.training.throughput import Throughput

#: The implementation name of cvbench's own results (the benchmark suite adds its
#: references' names beside it).
CVBENCH = "cvbench"


@dataclass(frozen=True)
class ThroughputResult:
    """Images/s of one implementation of one model in one mode.

    Attributes:
        model: cvbench model name.
        mode: "train" or "inference".
        implementation: who ran it: `CVBENCH`, a variant `"cvbench+<change>"` or a
            reference of the benchmark suite ("keras.applications", "torchvision").
        precision: Keras policy name ("float32", "mixed_bfloat16", "mixed_float16").
        batch_size: images per step and rank.
        image_size: input height and width.
        throughput: the measurement (images/s over all ranks).
        window_cpu_rates: images per CPU-second (this process' CPU time, all its threads) of
            each timed window, where the measurement recorded them (the benchmark suite
            does); empty otherwise. A window's wall rate over its CPU rate is the cores it
            kept busy, so a window that lost its parallelism shows, and a ratio of CPU rates
            compares the work two implementations do per image whatever their parallelism.
    """

    model: str
    mode: str
    implementation: str
    precision: str
    batch_size: int
    image_size: int
    throughput: Throughput
    window_cpu_rates: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields, the measurement flattened into them."""
        out = {
            "model": self.model,
            "mode": self.mode,
            "implementation": self.implementation,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "image_size": self.image_size,
        }
        out.update(self.throughput.to_dict())
        if self.window_cpu_rates:
            out["window_cpu_rates"] = list(self.window_cpu_rates)
        return out


@dataclass(frozen=True)
class LatencyResult:
    """Per-call latency of a cvbench model's inference at several batch sizes.

    Attributes:
        model: cvbench model name.
        implementation: who ran it (`CVBENCH`).
        precision: Keras policy name.
        image_size: input height and width.
        postprocessing: whether each call includes host post-processing (SSD's NMS).
        latencies: one `Latency` per batch size that ran.
        skipped: batch size -> why it did not run (e.g. "out of memory").
    """

    model: str
    implementation: str
    precision: str
    image_size: int
    postprocessing: bool
    latencies: tuple[Latency, ...]
    skipped: dict[int, str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "model": self.model,
            "implementation": self.implementation,
            "precision": self.precision,
            "image_size": self.image_size,
            "postprocessing": self.postprocessing,
            "latencies": [latency.to_dict() for latency in self.latencies],
            "skipped": {str(k): v for k, v in self.skipped.items()},
        }


def jsonable(obj: Any) -> Any:
    """`obj` with non-finite floats replaced by None, so that the JSON is strict.

    Example:
        >>> jsonable({"a": [1.0, float("nan")], "b": float("inf")})
        {'a': [1.0, None], 'b': None}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj
