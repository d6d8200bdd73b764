"""Markdown tables of a suite's results: throughput with ratios, latency percentiles."""

from __future__ import annotations

import math
from collections.abc import Sequence

from cvbench.benchmark.results import (
    CVBENCH,
    KERAS_APPLICATIONS,
    TORCHVISION,
    LatencyResult,
    ThroughputResult,
    ratio,
)
from cvbench.benchmark.timing import PERCENTILES

#: The model whose training rate SSD320's is compared with (issue goal: >= 0.15x).
DETECTION_BASELINE = "resnet50"
_REFERENCES = (KERAS_APPLICATIONS, TORCHVISION)


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
    value = ratio(top.throughput.images_per_sec, bottom.throughput.images_per_sec)
    return f"{value:.2f}x"


def _is_variant(result: ThroughputResult) -> bool:
    return result.implementation.startswith(f"{CVBENCH}+")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _rule(columns: int) -> str:
    return "|" + "---|" * columns


def throughput_table(results: Sequence[ThroughputResult]) -> str:
    """One row per model, mode and precision: cvbench's images/s, each variant's
    ("cvbench+<change>", with the ratio variant / cvbench), each reference's with the ratio
    cvbench / reference, and the compile (first step) seconds of each.

    SSD320's training row also gives its rate as a fraction of cvbench ResNet-50's training
    rate at the same precision, when that ran.

    Example:
        >>> from cvbench.benchmark.timing import Throughput
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
    lines = [_row(header), _rule(len(header))]
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
        lines.append(_row(cells))
    return "\n".join(lines)


def _note(cv: ThroughputResult, groups: dict) -> str:
    if cv.model == DETECTION_BASELINE or cv.mode != "train":
        return ""
    baseline = groups.get((DETECTION_BASELINE, "train", cv.precision), {}).get(CVBENCH)
    if baseline is None or cv.model != "ssd320":
        return ""
    value = ratio(cv.throughput.images_per_sec, baseline.throughput.images_per_sec)
    return f"{value:.2f}x {DETECTION_BASELINE} train"


def latency_table(results: Sequence[LatencyResult]) -> str:
    """One row per model, precision and batch size: latency percentiles in milliseconds.

    Example:
        >>> from cvbench.benchmark.timing import Latency
        >>> lat = Latency(1, 10, 5.0, {50: 4.0, 90: 6.0, 95: 7.0, 99: 8.0}, 200.0, 1.5)
        >>> print(latency_table([LatencyResult("resnet50", "cvbench", "float32", 64, False,
        ...                                    (lat,), {8: "out of memory"})]))
        | model | precision | image | batch | p50 ms | p90 ms | p95 ms | p99 ms | img/s | calls |
        |---|---|---|---|---|---|---|---|---|---|
        | resnet50 | float32 | 64 | 1 | 4.00 | 6.00 | 7.00 | 8.00 | 200.0 | 10 |
        | resnet50 | float32 | 64 | 8 | out of memory | | | | | |
    """
    header = ["model", "precision", "image", "batch"]
    header += [f"p{p} ms" for p in PERCENTILES] + ["img/s", "calls"]
    lines = [_row(header), _rule(len(header))]
    for r in results:
        name = r.model + (" (+ post-processing)" if r.postprocessing else "")
        for lat in r.latencies:
            cells = [name, r.precision, str(r.image_size), str(lat.batch_size)]
            cells += [f"{lat.percentiles_ms[p]:.2f}" for p in PERCENTILES]
            cells += [f"{lat.images_per_sec:.1f}", str(lat.calls)]
            lines.append(_row(cells))
        for size, why in r.skipped.items():
            cells = [name, r.precision, str(r.image_size), str(size), why]
            lines.append(_row(cells) + " |" * (len(header) - len(cells)))
    return "\n".join(lines)
