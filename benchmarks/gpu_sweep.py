"""What changes the JAX step's speed without changing its arithmetic: one prepared sweep.

    python benchmarks/gpu_sweep.py --out sweep --budget 470        # a GPU machine (< 8 min)
    python benchmarks/gpu_sweep.py --out /tmp/s --tiny --budget 600  # any CPU (its test)

Each case is one `cvbench benchmark --synthetic` process (JAX backend) under a time limit,
its JSON kept as soon as it ends, so a case cut short loses only itself:

- the baseline: ResNet-50, the recipe's precision on the GPU (fp16), batch 256; again at the
  end, so that a drift of the machine shows;
- XLA flags, one at a time: autotune level, the latency-hiding scheduler, cuDNN fusions,
  Triton GEMMs off, command buffers off (a flag this JAX does not know is listed as such,
  not run: an unknown flag aborts XLA);
- the host syncs: a sync after every step (`--log-every 1`) against one per window of 10;
- bf16 instead of fp16, and larger batches (what they give);
- Inception V3, SSD320 (batch 32) and ResNet-50 inference, with the default flags and with
  the flags that won on ResNet-50 training (a win is > 1% over the baseline);
- a profile of the ResNet-50 and Inception V3 training steps (`jax.profiler`, perfetto
  trace): the top kernels by time on the device (or, on a CPU, the host's XLA work).

Prints a Markdown table (case, model, batch, precision, XLA flags, img/s, ratio to the
baseline) and writes `sweep.json` and `sweep.md` under --out after every case.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The XLA flags swept one at a time, by case name.
XLA_CASES = {
    "autotune_0": "--xla_gpu_autotune_level=0",
    "autotune_2": "--xla_gpu_autotune_level=2",
    "latency_hiding": "--xla_gpu_enable_latency_hiding_scheduler=true",
    "cudnn_fusion": "--xla_gpu_enable_cudnn_fusion=true",
    "no_triton_gemm": "--xla_gpu_enable_triton_gemm=false",
    "no_command_buffer": "--xla_gpu_enable_command_buffer=",
}
#: A case wins when it beats the baseline by more than this fraction.
WIN = 0.01


@dataclass(frozen=True)
class Case:
    """One `cvbench benchmark` run of the sweep."""

    name: str
    model: str = "resnet50"
    batch_size: int | None = None
    precision: str = "auto"
    mode: str = "train"
    xla_flags: str = ""
    log_every: int = 10

    def command(self, python: str, sizes: Sizes, json_path: Path) -> list[str]:
        """The command line of this case."""
        batch = self.batch_size or sizes.batch_size(self.model)
        command = [python, "-m", "cvbench", "benchmark", "--backend", "jax", "--synthetic"]
        command += ["--model", self.model, "--batch-size", str(batch)]
        command += ["--precision", self.precision, "--mode", self.mode]
        command += ["--steps", str(sizes.steps), "--burn-in", str(sizes.burn_in)]
        command += ["--log-every", str(min(self.log_every, sizes.steps))]
        command += [*sizes.image_args, "--json", str(json_path)]
        return command


@dataclass(frozen=True)
class Sizes:
    """The sweep's sizes: full on a GPU, tiny on a CPU (the sweep's own test)."""

    steps: int = 60
    burn_in: int = 10
    image_args: tuple[str, ...] = ()
    batches: dict = field(default_factory=lambda: {"resnet50": 256, "ssd320": 32})
    larger: tuple[int, ...] = (384, 512)
    models: dict = field(default_factory=lambda: {"resnet50": "resnet50"})
    #: seconds one case may take (import, compile and steps)
    case_limit: float = 120.0

    @property
    def main_model(self) -> str:
        """The model the flags are swept on: ResNet-50, or its tiny stand-in."""
        return self.models.get("resnet50", "resnet50")

    def batch_size(self, model: str) -> int | None:
        return self.batches.get(model)

    @classmethod
    def tiny(cls) -> Sizes:
        return cls(
            steps=4,
            burn_in=1,
            image_args=("--image-size", "32"),
            batches={"resnet50": 4, "resnet18": 4, "inception_v3": 2, "ssd320": 2},
            larger=(8,),
            models={"resnet50": "resnet18"},
            case_limit=600.0,  # a CPU compiles a ResNet step in a minute or more
        )


def plan(sizes: Sizes) -> list[Case]:
    """The cases before the winners are known, in the order they run."""
    main = sizes.main_model
    cases = [Case("baseline", model=main)]
    cases += [Case(name, model=main, xla_flags=flags) for name, flags in XLA_CASES.items()]
    cases.append(Case("sync_every_step", model=main, log_every=1))
    cases.append(Case("bf16", model=main, precision="bf16"))
    cases += [Case(f"batch_{b}", model=main, batch_size=b) for b in sizes.larger]
    return cases


def winners(results: Sequence[dict]) -> str:
    """The XLA flags of every flag case that beat the baseline by more than `WIN`, joined.

    Example:
        >>> rows = [{"case": "baseline", "images_per_sec": 100.0, "xla_flags": ""},
        ...         {"case": "latency_hiding", "images_per_sec": 103.0, "xla_flags": "--a=1"},
        ...         {"case": "cudnn_fusion", "images_per_sec": 100.5, "xla_flags": "--b=1"}]
        >>> winners(rows)
        '--a=1'
    """
    base = next((r["images_per_sec"] for r in results if r["case"] == "baseline"), None)
    if not base:
        return ""
    won = [
        r["xla_flags"]
        for r in results
        if r["case"] in XLA_CASES and (r.get("images_per_sec") or 0) > base * (1 + WIN)
    ]
    return " ".join(won)


def after_winners(sizes: Sizes, flags: str) -> list[Case]:
    """The other models and inference, with the default flags and with `flags` if any."""
    main = sizes.main_model
    cases = []
    for model, mode in (("inception_v3", "train"), ("ssd320", "train"), (main, "inference")):
        cases.append(Case(f"{model}_{mode}", model=model, mode=mode))
        if flags:
            cases.append(Case(f"{model}_{mode}+won", model=model, mode=mode, xla_flags=flags))
    cases.append(Case("baseline_again", model=main))
    return cases


def flag_known(python: str, flags: str) -> bool:
    """Whether this JAX accepts `flags` in XLA_FLAGS (an unknown flag aborts the process)."""
    if not flags:
        return True
    probe = (
        "import jax, jax.numpy as jnp; jax.jit(lambda x: x + 1)(jnp.ones(2)).block_until_ready()"
    )
    env = {**os.environ, "XLA_FLAGS": flags}
    done = subprocess.run([python, "-c", probe], env=env, capture_output=True, timeout=120)
    return done.returncode == 0


def run_case(case: Case, *, python: str, sizes: Sizes, out: Path, limit: float) -> dict:
    """Runs `case`; its row: the case, its settings, images/s (None when it failed) and why."""
    row = asdict(case) | {"case": case.name, "images_per_sec": None, "status": ""}
    if not flag_known(python, case.xla_flags):
        return row | {"status": "flag unknown to this JAX"}
    path = out / f"{case.name}.json"
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    if case.xla_flags:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + case.xla_flags).strip()
    start = time.monotonic()
    try:
        done = subprocess.run(
            case.command(python, sizes, path), env=env, capture_output=True, text=True,
            timeout=limit,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return row | {"status": f"timed out after {limit:.0f} s"}
    row["seconds"] = round(time.monotonic() - start, 1)
    if done.returncode != 0 or not path.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return row | {"status": f"exit {done.returncode}: {last[:200]}"}
    result = json.loads(path.read_text())
    rate = result.get("images_per_sec") or result.get("throughput", {}).get("images_per_sec")
    return row | {"images_per_sec": rate, "status": "ok", "batch_size": result.get("batch_size")}


def top_kernels(trace_dir: Path, *, count: int = 15) -> list[tuple[str, float, float]]:
    """The events that took the most time in a `jax.profiler` perfetto trace under
    `trace_dir`: `(name, milliseconds, share of the total)`, the device's kernels when the
    trace has a device process, else the host's XLA work (Python frames, named `$...`,
    left out)."""
    traces = sorted(trace_dir.rglob("perfetto_trace.json.gz"))
    if not traces:
        raise FileNotFoundError(f"no perfetto_trace.json.gz under {trace_dir}")
    with gzip.open(traces[-1], "rt", encoding="utf-8") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    processes = {
        e["pid"]: e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    device = {pid for pid, name in processes.items() if name.startswith("/device:")}
    totals: collections.Counter = collections.Counter()
    for e in events:
        if e.get("ph") != "X" or e["name"].startswith("$"):
            continue
        if (e["pid"] in device) if device else True:
            totals[e["name"]] += float(e.get("dur", 0.0))
    whole = sum(totals.values()) or 1.0
    return [(name, us / 1000.0, us / whole) for name, us in totals.most_common(count)]


def profile(model: str, *, batch_size: int, image_size: int | None, steps: int, out: Path) -> list:
    """Traces `steps` training steps of cvbench's `model` (after a compiling warm-up) and
    returns `top_kernels` of the trace."""
    import jax

    from cvbench.benchmark.run import cvbench_training
    from cvbench.benchmark.workloads import cvbench_model

    workload, _ = cvbench_training(
        cvbench_model(model, image_size=image_size),
        batch_size=batch_size,
        precision="auto",
        planned_steps=steps + 3,
    )
    workload.first_step()
    workload.run(2)
    with jax.profiler.trace(str(out), create_perfetto_trace=True):
        workload.run(steps)
    workload.close()
    return top_kernels(out)


def table(rows: Sequence[dict]) -> str:
    """The sweep's Markdown table: every case with its rate and its ratio to the baseline.

    Example:
        >>> rows = [{"case": "baseline", "model": "resnet50", "batch_size": 256,
        ...          "precision": "auto", "mode": "train", "xla_flags": "",
        ...          "images_per_sec": 7000.0, "status": "ok"},
        ...         {"case": "bf16", "model": "resnet50", "batch_size": 256,
        ...          "precision": "bf16", "mode": "train", "xla_flags": "",
        ...          "images_per_sec": 7350.0, "status": "ok"}]
        >>> print(table(rows).splitlines()[3])  # 7350 / 7000 = 1.05
        | bf16 | resnet50 | train | 256 | bf16 |  | 7350.0 | 1.05x | ok |
    """
    base = {}
    for r in rows:
        if r["case"] == "baseline" and r.get("images_per_sec"):
            base[(r["model"], r["mode"])] = r["images_per_sec"]
    header = "| case | model | mode | batch | precision | XLA flags | img/s | / baseline | status |"
    lines = [header, "|" + "---|" * 9]
    for r in rows:
        rate = r.get("images_per_sec")
        ref = base.get((r["model"], r["mode"]))
        ratio = f"{rate / ref:.2f}x" if rate and ref else "-"
        shown = f"{rate:.1f}" if rate else "-"
        lines.append(
            f"| {r['case']} | {r['model']} | {r['mode']} | {r.get('batch_size') or '-'} "
            f"| {r['precision']} | {r['xla_flags']} | {shown} | {ratio} | {r['status']} |"
        )
    return "\n".join(lines)


def sweep(
    *,
    python: str,
    sizes: Sizes,
    out: Path,
    budget: float,
    only: Sequence[str] = (),
    report: Callable[[str], None] = print,
) -> list[dict]:
    """Runs the cases in order within `budget` seconds (only those named in `only`, when
    given); writes sweep.json / sweep.md after every case; returns the rows."""
    start = time.monotonic()
    rows: list[dict] = []

    def left() -> float:
        return budget - (time.monotonic() - start)

    def write() -> None:
        (out / "sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
        (out / "sweep.md").write_text(table(rows) + "\n")

    def run(cases: Sequence[Case]) -> None:
        for case in cases:
            if only and case.name not in only:
                continue
            limit = min(sizes.case_limit, left() - 10)
            if limit < 20:
                rows.append(asdict(case) | {"case": case.name, "status": "no time left"})
                continue
            rows.append(run_case(case, python=python, sizes=sizes, out=out, limit=limit))
            report(f"{case.name}: {rows[-1]['status']} {rows[-1].get('images_per_sec')}")
            write()

    run(plan(sizes))
    run(after_winners(sizes, winners(rows)))
    write()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (0 when the baseline ran)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="sweep", help="results folder (sweep)")
    p.add_argument("--budget", type=float, default=470.0, help="seconds for the sweep (470)")
    p.add_argument("--tiny", action="store_true", help="tiny models and sizes (any CPU)")
    p.add_argument("--python", default=sys.executable, help="the Python of the cases")
    p.add_argument("--no-profile", action="store_true", help="skip the two profiles")
    p.add_argument("--cases", default="", help="comma-separated case names to run (all)")
    p.add_argument("--profile-only", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = Sizes.tiny() if args.tiny else Sizes()
    image_size = 32 if args.tiny else None
    if args.profile_only:
        model, batch = args.profile_only.split(":")
        top = profile(
            model, batch_size=int(batch), image_size=image_size, steps=3 if args.tiny else 10,
            out=out / f"profile_{model}",
        )  # fmt: skip
        (out / f"profile_{model}.json").write_text(json.dumps(top, indent=1) + "\n")
        for name, ms, share in top:
            print(f"{share:6.1%} {ms:10.2f} ms  {name}")
        return 0
    only = [c for c in args.cases.split(",") if c]
    rows = sweep(python=args.python, sizes=sizes, out=out, budget=args.budget * 0.75, only=only)
    print(table(rows))
    if not args.no_profile:
        for model in (sizes.main_model, "inception_v3"):
            batch = sizes.batch_size(model) or (2 if args.tiny else 128)
            print(f"== profile {model} (batch {batch})", flush=True)
            subprocess.run(
                [args.python, __file__, "--out", str(out), "--profile-only", f"{model}:{batch}"]
                + (["--tiny"] if args.tiny else []),
                env={**os.environ, "KERAS_BACKEND": "jax"},
                timeout=max(sizes.case_limit / 2, args.budget * 0.12),
                check=False,
            )
    return 0 if any(r["case"] == "baseline" and r.get("images_per_sec") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
