"""The suite's throughput table: cvbench beside its variants and references, with ratios.

(The latency table is `cvbench benchmark`'s own, `cvbench.benchmark.latency_table`.)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from cvbench.benchmark.results import CVBENCH, ThroughputResult
from cvbench.benchmark.table import markdown_row, markdown_rule
from cvbench.training.throughput import Throughput
from cvbench.zoo import DETECTION, task_of

from .reference import KERAS, TORCH, TORCH_COMPILE

#: The model whose training rate a detector's is compared with (issue goal: SSD320 >= 0.15x).
DETECTION_BASELINE = "resnet50"
_REFERENCES = (KERAS, TORCH, TORCH_COMPILE)


def ratio(numerator: float, denominator: float) -> float:
    """`numerator / denominator`, NaN when the denominator is not positive.

    Example:
        >>> ratio(3.0, 2.0), ratio(1.0, 0.0)
        (1.5, nan)
    """
    return numerator / denominator if denominator > 0 else float("nan")


@dataclass(frozen=True)
class PairedRatio:
    """The ratio of two workloads timed in alternating windows: the median of the per-window
    ratios `top[w] / bottom[w]` and their range.

    Window `w` of both ran back to back (`measure_throughput` alternates them), so a change
    in the machine's load between windows moves both rates of a pair alike; the median of
    the pairs' ratios ignores the odd pair that one burst of load hit, where the ratio of
    the two mean rates carries every burst.

    Attributes:
        median: the median of the per-window ratios.
        low, high: the smallest and largest per-window ratio (the spread).
        pairs: the number of window pairs.
    """

    median: float
    low: float
    high: float
    pairs: int

    def format(self) -> str:
        """`1.10x`, with the range of the pairs when there are several: `1.10x (1.02-1.18)`.

        Example:
            >>> PairedRatio(1.1, 1.02, 1.18, 3).format(), PairedRatio(1.1, 1.1, 1.1, 1).format()
            ('1.10x (1.02-1.18)', '1.10x')
        """
        if self.pairs < 2:
            return f"{self.median:.2f}x"
        return f"{self.median:.2f}x ({self.low:.2f}-{self.high:.2f})"


def paired_ratio(top: Throughput, bottom: Throughput) -> PairedRatio:
    """The median and range of `top`'s window rates over `bottom`'s, window by window.

    Two measurements of different window counts (not timed side by side) are compared by
    their mean rates, as one pair.

    Example:
        >>> from cvbench.training.throughput import Throughput
        >>> def t(*rates):
        ...     return Throughput(sum(rates) / len(rates), 0.0, 0.0, rates, 1, 1, 0, 0, 1, 0)
        >>> paired_ratio(t(12.0, 6.0, 11.0), t(10.0, 10.0, 10.0))  # 1.2, 0.6, 1.1: median 1.1
        PairedRatio(median=1.1, low=0.6, high=1.2, pairs=3)
    """
    tops, bottoms = top.window_rates, bottom.window_rates
    if len(tops) != len(bottoms) or not tops:
        tops, bottoms = (top.images_per_sec,), (bottom.images_per_sec,)
    return _paired(tops, bottoms)


def _paired(tops: Sequence[float], bottoms: Sequence[float]) -> PairedRatio:
    ratios = [ratio(a, b) for a, b in zip(tops, bottoms, strict=True)]
    if not ratios or any(math.isnan(r) or math.isinf(r) for r in ratios):
        nan = float("nan")
        return PairedRatio(nan, nan, nan, len(ratios))
    return PairedRatio(statistics.median(ratios), min(ratios), max(ratios), len(ratios))


def paired_cpu_ratio(top: ThroughputResult, bottom: ThroughputResult) -> PairedRatio:
    """The median and range of `top`'s images per CPU-second over `bottom`'s, window by
    window (`ThroughputResult.window_cpu_rates`); NaN when either has none or their window
    counts differ.

    Unlike the wall-clock ratio, it does not move when one side's window keeps fewer cores
    busy (a thread pool that runs its threads one at a time, another process taking a
    core): it compares the work done per image. It cannot see a slowdown that only waits.

    Example:
        >>> from cvbench.training.throughput import Throughput
        >>> t = Throughput(1.0, 0.0, 0.0, (1.0, 1.0), 1, 1, 0, 0, 1, 0)
        >>> def result(*cpu_rates):
        ...     return ThroughputResult("resnet50", "train", "x", "float32", 1, 1, t, cpu_rates)
        >>> paired_cpu_ratio(result(9.0, 12.0, 10.0), result(10.0, 10.0, 10.0))
        PairedRatio(median=1.0, low=0.9, high=1.2, pairs=3)
        >>> paired_cpu_ratio(result(9.0), result()).pairs
        0
    """
    tops, bottoms = top.window_cpu_rates, bottom.window_cpu_rates
    if len(tops) != len(bottoms):
        tops, bottoms = (), ()
    return _paired(tops, bottoms)


def _rate(result: ThroughputResult | None) -> str:
    if result is None:
        return "-"
    t = result.throughput
    if math.isnan(t.stderr):
        return f"{t.images_per_sec:.1f}"
    return f"{t.images_per_sec:.1f} ± {t.stderr:.1f}"


def _ratio(top: ThroughputResult | None, bottom: ThroughputResult | None) -> str:
    if top is None or bottom is None:
        return "-"
    return paired_ratio(top.throughput, bottom.throughput).format()


def _is_variant(result: ThroughputResult) -> bool:
    return result.implementation.startswith(f"{CVBENCH}+")


def throughput_table(results: Sequence[ThroughputResult]) -> str:
    """One row per model, mode and precision: cvbench's images/s, each variant's
    ("cvbench+<change>", with the ratio variant / cvbench), each reference's with the ratio
    cvbench / reference, and the compile (first step) seconds of each. A ratio is the median
    of the per-window ratios with their range (`paired_ratio`).

    A detector's (SSD320's) training row also gives its rate as a fraction of cvbench
    ResNet-50's training rate at the same precision, when that ran.

    Example:
        >>> from cvbench.training.throughput import Throughput
        >>> def result(impl, rate):
        ...     t = Throughput(rate, float("nan"), 0.0, (rate,), 1, 8, 2.0, 0.0, 1, rate)
        ...     return ThroughputResult("resnet50", "train", impl, "float32", 8, 64, t)
        >>> table = throughput_table([result("cvbench", 33.0), result("keras.applications", 30.0)])
        >>> print(table.splitlines()[0][:66])
        | model | mode | precision | batch | image | cvbench img/s | keras
        >>> print(table.splitlines()[2])  # 33 / 30 = 1.10
        | resnet50 | train | float32 | 8 | 64 | 33.0 | 30.0 | 1.10x | 2 / 2 |  |
    """
    references = [r for r in _REFERENCES if any(x.implementation == r for x in results)]
    variants = list(dict.fromkeys(x.implementation for x in results if _is_variant(x)))
    header = ["model", "mode", "precision", "batch", "image", f"{CVBENCH} img/s"]
    for variant in variants:
        header += [f"{variant} img/s", f"{variant} / {CVBENCH}"]
    for ref in references:
        header += [f"{ref} img/s", f"{CVBENCH} / {ref}"]
    header += ["compile s", "note"]
    lines = [markdown_row(header), markdown_rule(len(header))]
    groups: dict[tuple[str, str, str], dict[str, ThroughputResult]] = {}
    for r in results:
        groups.setdefault((r.model, r.mode, r.precision), {})[r.implementation] = r
    for (model, mode, precision), by_impl in groups.items():
        cv = by_impl.get(CVBENCH)
        if cv is None:
            continue
        cells = [model, mode, precision, str(cv.batch_size), str(cv.image_size), _rate(cv)]
        for variant in variants:
            cells += [_rate(by_impl.get(variant)), _ratio(by_impl.get(variant), cv)]
        for ref in references:
            cells += [_rate(by_impl.get(ref)), _ratio(cv, by_impl.get(ref))]
        others = [*variants, *references]
        compile_s = [cv] + [by_impl[name] for name in others if name in by_impl]
        cells.append(" / ".join(f"{r.throughput.compile_seconds:.0f}" for r in compile_s))
        cells.append(_note(cv, groups))
        lines.append(markdown_row(cells))
    return "\n".join(lines)


def _note(cv: ThroughputResult, groups: dict) -> str:
    if cv.model == DETECTION_BASELINE or cv.mode != "train":
        return ""
    baseline = groups.get((DETECTION_BASELINE, "train", cv.precision), {}).get(CVBENCH)
    if baseline is None or task_of(cv.model) != DETECTION:
        return ""
    value = ratio(cv.throughput.images_per_sec, baseline.throughput.images_per_sec)
    return f"{value:.2f}x {DETECTION_BASELINE} train"
