"""The CPU regression check (`make bench`): cvbench's ResNet-50 against keras.applications,
training and inference, as paired ratios held against the floors of this CPU kind.

    python benchmarks/cpu_check.py                    # what `make bench` runs
    python benchmarks/cpu_check.py --slowdown 0.3     # cvbench's step 30% slower: must fail
    python benchmarks/cpu_check.py --emulate-avx2     # float32 with oneDNN capped at AVX2

Both implementations run in alternating timing windows in one process (the suite of
`benchmarks/train_throughput.py`). The statistic held against the floors is the median of
the per-window ratios of images per CPU-second (`throughput_suite.table.paired_cpu_ratio`),
cvbench / keras.applications, with their range: the wall-clock ratio is printed beside it but
not judged, because keras.applications' `fit` and `predict` on a 2-core CPU switch between
a mode that keeps both cores busy and one that runs its two threads one at a time (half the
images/s for the same CPU time per image), so its wall rate is bimodal and a median of wall
ratios says which mode the reference happened to be in; per CPU-second both modes agree. The
per-window rates and cores kept busy of both sides are printed and written to `--json`. The
CPU statistic cannot see a slowdown that only waits (an idle sync); `--slowdown` spins, so it
shows in both.

The precisions checked are float32 on every CPU and, on a CPU with native bfloat16
(`avx512_bf16` or `amx_bf16`), bfloat16 too. Each median is held against its floor in
`benchmarks/cpu_floors.json` for the CPU kind at hand; a median under its floor fails the
check (exit 1). The first line printed is the CPU line (model, cores, flags), so a figure is
never read without the machine it came from.

`--emulate-avx2` runs the check again in a child process whose oneDNN is capped at AVX2
(`ONEDNN_MAX_CPU_ISA=AVX2`, set before TensorFlow loads) and holds it against the avx2
floors: oneDNN's convolutions and matrix products then use AVX2 kernels, as on an AVX2-only
CPU, while TensorFlow's own Eigen kernels are built for AVX2 in any case, and `FastConv2D`
takes the fast gradients an AVX2 CPU takes (`fast_gradient_kinds` reads the cap). It is not
an AVX2 machine: caches, memory bandwidth, core count and clock stay this CPU's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
#: The environment that caps oneDNN at AVX2 (`--emulate-avx2`), read when TensorFlow loads.
AVX2_CAP = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
#: The statistics a floor can be held against: per CPU-second or wall clock.
STATISTICS = ("cpu", "wall")


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
    """One checked ratio: what was measured, its floor, and whether it holds.

    `median`, `low` and `high` are of the judged `statistic` ("cpu": images per CPU-second,
    "wall": images per second); `wall` is the wall-clock paired ratio beside a "cpu" one.
    """

    precision: str
    mode: str
    median: float
    low: float
    high: float
    floor: float
    statistic: str = "wall"
    wall: tuple[float, float, float] | None = None

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
            >>> Verdict("float32", "train", 0.95, 0.9, 1.0, 0.9, "cpu", (1.3, 0.9, 1.8)).line()
            'float32 train: cvbench / keras.applications per CPU-second 0.95x (0.90-1.00), floor 0.90x: ok; wall clock 1.30x (0.90-1.80)'
        """  # noqa: E501
        verdict = "ok" if self.holds else "LOW"
        per = " per CPU-second" if self.statistic == "cpu" else ""
        line = (
            f"{self.precision} {self.mode}: cvbench / keras.applications{per} "
            f"{self.median:.2f}x ({self.low:.2f}-{self.high:.2f}), floor {self.floor:.2f}x: "
            f"{verdict}"
        )
        if self.wall is not None:
            line += f"; wall clock {self.wall[0]:.2f}x ({self.wall[1]:.2f}-{self.wall[2]:.2f})"
        return line


def floors_of(kind: str, floors: Mapping) -> Mapping[str, Mapping[str, float]]:
    """The floors of CPU kind `kind`: policy -> mode -> floor.

    Raises:
        ValueError: when the file has no floors for `kind`.
    """
    try:
        return floors["floors"][kind]
    except KeyError:
        raise ValueError(f"{FLOORS.name} has no floors for CPU kind {kind!r}") from None


def judge(
    results: Sequence, floors: Mapping[str, Mapping[str, float]], statistic: str = "wall"
) -> list[Verdict]:
    """A verdict for every (precision, mode) of `floors` that `results` measured: cvbench's
    paired ratio over keras.applications'.

    Args:
        results: the suite's `ThroughputResult`s.
        floors: policy -> mode -> floor.
        statistic: "cpu" (images per CPU-second, `paired_cpu_ratio`, with the wall-clock
            ratio beside it) or "wall" (images per second, `paired_ratio`).

    Raises:
        ValueError: for another statistic.
    """
    from cvbench.benchmark.results import CVBENCH
    from throughput_suite.reference import KERAS
    from throughput_suite.table import paired_cpu_ratio, paired_ratio

    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    found = {(r.precision, r.mode, r.implementation): r for r in results}
    verdicts = []
    for precision, modes in floors.items():
        for mode, floor in modes.items():
            ours = found.get((precision, mode, CVBENCH))
            theirs = found.get((precision, mode, KERAS))
            if ours is None or theirs is None:
                continue
            wall = paired_ratio(ours.throughput, theirs.throughput)
            judged = paired_cpu_ratio(ours, theirs) if statistic == "cpu" else wall
            beside = (wall.median, wall.low, wall.high) if statistic == "cpu" else None
            verdicts.append(
                Verdict(
                    precision, mode, judged.median, judged.low, judged.high, float(floor),
                    statistic, beside,
                )
            )  # fmt: skip
    return verdicts


def window_lines(results: Sequence) -> list[str]:
    """Per-window images/s and cores kept busy (wall rate / CPU rate) of each result, so
    that a side whose windows switch mode is seen.

    Example:
        >>> from cvbench.benchmark.results import ThroughputResult
        >>> from cvbench.training.throughput import Throughput
        >>> t = Throughput(15.0, 0.0, 0.0, (20.0, 10.0), 1, 16, 0, 0, 2, 0)
        >>> r = ThroughputResult("resnet50", "train", "keras.applications", "float32", 16, 128,
        ...                      t, (10.0, 10.0))
        >>> window_lines([r])
        ['resnet50 train float32 keras.applications: img/s 20.0 10.0; cores busy 2.0 1.0']
    """
    lines = []
    for r in results:
        rates = " ".join(f"{x:.1f}" for x in r.throughput.window_rates)
        line = f"{r.model} {r.mode} {r.precision} {r.implementation}: img/s {rates}"
        if len(r.window_cpu_rates) == len(r.throughput.window_rates):
            pairs = zip(r.throughput.window_rates, r.window_cpu_rates, strict=True)
            line += "; cores busy " + " ".join(f"{w / c:.1f}" for w, c in pairs)
        lines.append(line)
    return lines


def check_kind(kind: str, flags: frozenset[str] | set[str]) -> str:
    """`kind` when this CPU (with `flags`) can run it: a kind of the floors file whose flag
    the CPU has.

    Example:
        >>> check_kind("avx2", {"avx2", "avx512_bf16"})
        'avx2'
        >>> check_kind("amx_bf16", {"avx2"})
        Traceback (most recent call last):
        ...
        ValueError: --cpu-kind amx_bf16 needs a CPU with amx_bf16; this one has avx2
    """
    if kind not in CPU_KINDS:
        raise ValueError(f"--cpu-kind must be one of {CPU_KINDS}, got {kind!r}")
    if kind not in flags:
        have = ", ".join(k for k in CPU_KINDS if k in flags) or "none of them"
        raise ValueError(f"--cpu-kind {kind} needs a CPU with {kind}; this one has {have}")
    return kind


def emulate_avx2(argv: Sequence[str]) -> int:
    """Runs the check with `argv` (less `--emulate-avx2`) in a child process whose oneDNN is
    capped at AVX2 (`AVX2_CAP`), against the avx2 floors; returns its exit code."""
    args = [a for a in argv if a != "--emulate-avx2"]
    command = [sys.executable, str(Path(__file__).resolve()), *args, "--cpu-kind", "avx2"]
    print("emulated AVX2 (oneDNN capped): " + " ".join(f"{k}={v}" for k, v in AVX2_CAP.items()))
    return subprocess.call(command, env={**os.environ, **AVX2_CAP})


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
    p.add_argument(
        "--statistic",
        choices=STATISTICS,
        default="cpu",
        help="the ratio held against the floors: per CPU-second (cpu, the default) or wall",
    )
    p.add_argument(
        "--emulate-avx2",
        action="store_true",
        help="run in a child process with oneDNN capped at AVX2, against the avx2 floors",
    )
    p.add_argument(
        "--cpu-kind",
        choices=CPU_KINDS,
        default=None,
        help="check this kind's floors and precisions (default: the CPU's best kind)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the check; returns 0 when every ratio holds its floor, 1 otherwise."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.emulate_avx2:
        return emulate_avx2(argv)
    from cvbench.benchmark.results import jsonable
    from cvbench.models.layers import fast_gradient_kinds, onednn_cap, onednn_runs_avx512
    from cvbench.utils.cpu import cpu_flags
    from cvbench.utils.io import write_json_atomic
    from throughput_suite import SuiteConfig, describe_environment, run_suite

    environment = describe_environment(["python", "benchmarks/cpu_check.py", *argv])
    print(f"cpu: {environment['cpu_line']}", flush=True)
    flags = cpu_flags()
    kind = cpu_kind(flags) if args.cpu_kind is None else check_kind(args.cpu_kind, flags)
    capped = {k: os.environ[k] for k in AVX2_CAP if k in os.environ}
    environment["onednn_cap"] = capped
    # Which convolutions take FastConv2D's fast gradients here: the flags and the cap decide.
    kinds = fast_gradient_kinds(flags, onednn_max_isa=onednn_cap())
    environment["fast_gradient_kinds"] = kinds
    # Whether training's batch norms take TensorFlow's fused kernel (inference's always do).
    fused = onednn_runs_avx512(flags, onednn_max_isa=onednn_cap())
    environment["fused_batchnorm_in_training"] = fused
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
    emulated = f" (emulated: {', '.join(f'{k}={v}' for k, v in capped.items())})" if capped else ""
    print(
        f"cpu kind: {kind}{emulated}; precisions: {', '.join(precisions)}; "
        f"fast gradients: {kinds}; fused batch norm in training: {'yes' if fused else 'no'}",
        flush=True,
    )
    results = run_suite(config, report=lambda line: print(line, flush=True))
    for line in window_lines(results.throughput):
        print(line)
    verdicts = judge(results.throughput, floors, args.statistic)
    for verdict in verdicts:
        print(verdict.line())
    if args.json:
        payload = {
            "environment": environment,
            "config": config.to_dict(),
            "cpu_kind": kind,
            "statistic": args.statistic,
            "verdicts": [v.__dict__ | {"holds": v.holds} for v in verdicts],
        }
        write_json_atomic(args.json, jsonable(payload | results.to_dict()))
    ok = bool(verdicts) and all(v.holds for v in verdicts)
    print("cpu check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as error:  # a bad argument: one line, exit 2
        print(f"cpu check: {error}", file=sys.stderr)
        sys.exit(2)
