"""Markdown tables of benchmark results: the latency percentiles of `cvbench benchmark`.

The benchmark suite (`benchmarks/throughput_suite`) builds its throughput table from the
same cells (`markdown_row`, `markdown_rule`).
"""

from __future__ import annotations

from collections.abc import Sequence

from cvbench.benchmark.latency import PERCENTILES
from cvbench.benchmark.results import LatencyResult


def markdown_row(cells: Sequence[str]) -> str:
    """One Markdown table row.

    Example:
        >>> markdown_row(["a", "1"])
        '| a | 1 |'
    """
    return "| " + " | ".join(cells) + " |"


def markdown_rule(columns: int) -> str:
    """The rule under a Markdown header of `columns` columns.

    Example:
        >>> markdown_rule(3)
        '|---|---|---|'
    """
    return "|" + "---|" * columns


def latency_table(results: Sequence[LatencyResult]) -> str:
    """One row per model, precision and batch size: latency percentiles in milliseconds.

    Example:
        >>> from cvbench.benchmark.latency import Latency
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
    lines = [markdown_row(header), markdown_rule(len(header))]
    for r in results:
        name = r.model + (" (+ post-processing)" if r.postprocessing else "")
        for lat in r.latencies:
            cells = [name, r.precision, str(r.image_size), str(lat.batch_size)]
            cells += [f"{lat.percentiles_ms[p]:.2f}" for p in PERCENTILES]
            cells += [f"{lat.images_per_sec:.1f}", str(lat.calls)]
            lines.append(markdown_row(cells))
        for size, why in r.skipped.items():
            cells = [name, r.precision, str(r.image_size), str(size), why]
            lines.append(markdown_row(cells) + " |" * (len(header) - len(cells)))
    return "\n".join(lines)
