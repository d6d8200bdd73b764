"""The CPU regression check (`make bench`): cvbench's ResNet-50 against keras.applications,
training and inference, as paired ratios held against the floors of this CPU kind.

    python benchmarks/cpu_check.py                    # what `make bench` runs
    python benchmarks/cpu_check.py --slowdown 0.3     # cvbench's step 30% slower: must fail

Both implementations run in alternating timing windows in one process (the suite of
`benchmarks/train_throughput.py`); the statistic is the median of the per-window ratios
cvbench / keras.applications with their range (`throughput_suite.table.paired_ratio`), which
a burst of load on a shared machine moves far less than a ratio of mean rates. The precisions
checked are float32 on every CPU and, on a CPU with native bfloat16 (`avx512_bf16` or
`amx_bf16`), bfloat16 too. Each median is held against its floor in
`benchmarks/cpu_floors.json` for the CPU kind at hand; a median under its floor fails the
check (exit 1). The first line printed is the CPU line (model, cores, flags), so a figure is
never read without the machine it came from.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

from cvbench.cli.args import positive_int  # noqa: E402

#: The CPU kinds of the floors file, best first: the first whose flag the CPU has is its kind.
CPU_KINDS = ("amx_bf16", "avx512_bf16", "avx2")
#: Which precisions run on a kind: bfloat16 only where the CPU computes it natively.
PRECISIONS = {"amx_bf16": ("fp32", "bf16"), "avx512_bf16": ("fp32", "bf16"), "avx2": ("fp32",)}
#: The suite's precision names and the policy names of the floors file.
POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16"}
FLOORS = _HERE / "cpu_floors.json"


def cpu_kind(flags: frozenset[str] | set[str]) -> str:
    """The CPU kind of the floors file for a CPU with `flags`.

    Example:
        >>> cpu_kind({"avx2", "avx512f", "avx512_bf16"}), cpu_kind({"avx2"})
        ('avx512_bf16', 'avx2')
        >>> cpu_kind({"sse4_2"})
        Traceback (most recent call last):
        ...
        ValueError: this CPU has none of ('amx_bf16', 'avx512_bf16', 'avx2'): no floors for it
    """
    for kind in CPU_KINDS:
        if kind in flags:
            return kind
    raise ValueError(f"this CPU has none of {CPU_KINDS}: no floors for it")


@dataclass(frozen=True)
class Verdict:
    """One checked ratio: what was measured, its floor, and whether it holds."""

    precision: str
    mode: str
    median: float
    low: float
    high: float
    floor: float

    @property
    def holds(self) -> bool:
        """The median is at or over the floor (a NaN median does not hold)."""
        return self.median >= self.floor

    def line(self) -> str:
        """One line of the report.

        Example:
            >>> Verdict("float32", "train", 1.04, 0.98, 1.1, 0.95).line()
            'float32 train: cvbench / keras.applications 1.04x (0.98-1.10), floor 0.95x: ok'
            >>> Verdict("float32", "inference", 0.7, 0.6, 0.8, 0.8).line().endswith(
            ...     "0.70x (0.60-0.80), floor 0.80x: LOW")
            True
        """
        verdict = "ok" if self.holds else "LOW"
        return (
            f"{self.precision} {self.mode}: cvbench / keras.applications "
            f"{self.median:.2f}x ({self.low:.2f}-{self.high:.2f}), floor {self.floor:.2f}x: "
            f"{verdict}"
        )


def floors_of(kind: str, floors: Mapping) -> Mapping[str, Mapping[str, float]]:
    """The floors of CPU kind `kind`: policy -> mode -> floor.

    Raises:
        ValueError: when the file has no floors for `kind`.
    """
    try:
        return floors["floors"][kind]
    except KeyError:
        raise ValueError(f"{FLOORS.name} has no floors for CPU kind {kind!r}") from None


def judge(results: Sequence, floors: Mapping[str, Mapping[str, float]]) -> list[Verdict]:
    """A verdict for every (precision, mode) of `floors` that `results` measured: cvbench's
    paired ratio over keras.applications'.

    Args:
        results: the suite's `ThroughputResult`s.
        floors: policy -> mode -> floor.
    """
    from cvbench.benchmark.results import CVBENCH
    from throughput_suite.reference import KERAS
    from throughput_suite.table import paired_ratio

    found = {(r.precision, r.mode, r.implementation): r.throughput for r in results}
    verdicts = []
    for precision, modes in floors.items():
        for mode, floor in modes.items():
            ours = found.get((precision, mode, CVBENCH))
            theirs = found.get((precision, mode, KERAS))
            if ours is None or theirs is None:
                continue
            paired = paired_ratio(ours, theirs)
            verdicts.append(
                Verdict(precision, mode, paired.median, paired.low, paired.high, float(floor))
            )
    return verdicts


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=positive_int, default=128, help="input size (128)")
    p.add_argument("--batch-size", type=positive_int, default=16, help="batch (16)")
    p.add_argument("--warmup", type=positive_int, default=2, help="unmeasured steps (2)")
    p.add_argument("--windows", type=positive_int, default=7, help="window pairs (7)")
    p.add_argument("--window-steps", type=positive_int, default=3, help="steps a window (3)")
    p.add_argument(
        "--slowdown",
        type=float,
        default=0.0,
        help="make cvbench's steps this fraction slower on purpose (the check's own test)",
    )
    p.add_argument("--floors", default=str(FLOORS), help="the floors file (cpu_floors.json)")
    p.add_argument("--json", default=None, help="write the measurements and verdicts here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the check; returns 0 when every ratio holds its floor, 1 otherwise."""
    args = build_parser().parse_args(argv)
    from cvbench.benchmark.results import jsonable
    from cvbench.utils.cpu import cpu_flags
    from cvbench.utils.io import write_json_atomic
    from throughput_suite import SuiteConfig, describe_environment, run_suite

    environment = describe_environment(["python", "benchmarks/cpu_check.py", *(argv or [])])
    print(f"cpu: {environment['cpu_line']}", flush=True)
    kind = cpu_kind(cpu_flags())
    with open(args.floors, encoding="utf-8") as f:
        floors = floors_of(kind, json.load(f))
    precisions = PRECISIONS[kind]
    config = SuiteConfig(
        models=("resnet50",),
        precisions=precisions,
        batch_size=args.batch_size,
        image_size=args.image_size,
        warmup_steps=args.warmup,
        windows=args.windows,
        window_steps=args.window_steps,
        latency_batch_sizes=(),
        slowdown=args.slowdown,
    )
    print(f"cpu kind: {kind}; precisions: {', '.join(precisions)}", flush=True)
    results = run_suite(config, report=lambda line: print(line, flush=True))
    verdicts = judge(results.throughput, floors)
    for verdict in verdicts:
        print(verdict.line())
    if args.json:
        payload = {
            "environment": environment,
            "config": config.to_dict(),
            "verdicts": [v.__dict__ | {"holds": v.holds} for v in verdicts],
        }
        write_json_atomic(args.json, jsonable(payload | results.to_dict()))
    ok = bool(verdicts) and all(v.holds for v in verdicts)
    print("cpu check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
