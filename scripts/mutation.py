#!/usr/bin/env python
"""Mutation testing of cvbench's core units against their mirror test files.

    python scripts/mutation.py                       # every target, 60 mutants each
    python scripts/mutation.py detection.matcher     # one module (a prefix picks a group)
    python scripts/mutation.py --all --jobs 2 --json report.json

Each mutant is one small change to one module (see `scripts/mutation_ops.py`): a flipped
comparison, a swapped operator, a changed constant, min/max swapped, a negated condition, a
dropped return value. The module's fast tests (`-m "not slow"`) run against it; a failing run
(or a broken import) *kills* it, a passing run lets it *survive*, a run past the time limit
*times out* (counted as detected). Mutants listed in `scripts/mutation_equivalent/*.txt` (they
cannot change behaviour; each with a one-line reason) are reported apart and left out of the
score, which is killed + timed out over the non-equivalent mutants tried.

Speed: a warm parent imports TensorFlow, Keras, NumPy and pytest once, never cvbench, and
forks one child per mutant; the child serves the mutated module through an import hook and
runs pytest in-process (about 1 s instead of a 5 s interpreter start). Nothing in the checkout
is written: the mutant's text goes to a scratch folder, for AutoGraph to read. The modules in
`ALSO_JAX` have code only the JAX backend runs: their survivors are tried again on JAX.

Why not mutmut or cosmic-ray: mutmut 3 rewrites every function into a trampoline and forks
after the test modules have run TensorFlow ops, and the data modules' functions are traced by
tf.function / AutoGraph, which reads their source; cosmic-ray rewrites files in place and
starts an interpreter per mutant (about 5 s of TensorFlow import each). The operators here are
the usual ones of both tools.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))  # this checkout's cvbench, whatever the venv's editable install

from mutation_ops import Mutant, compile_mutant, find_mutants, mutated_source  # noqa: E402

# module (under cvbench/) -> the test files that own it (the mirror file first).
TARGETS: dict[str, tuple[str, ...]] = {
    "detection.box_ops": ("tests/detection/test_box_ops.py",),
    "detection.box_coder": ("tests/detection/test_box_coder.py",),
    "detection.anchors": ("tests/detection/test_anchors.py",),
    "detection.matcher": ("tests/detection/test_matcher.py",),
    "detection.targets": ("tests/detection/test_targets.py",),
    "detection.losses": ("tests/detection/test_losses.py",),
    "detection.postprocess": ("tests/detection/test_postprocess.py",),
    "training.schedules": ("tests/training/test_schedules.py",),
    "training.optimizers": ("tests/training/test_optimizers.py",),
    "training.precision": ("tests/training/test_precision.py",),
    "training.checkpoint": ("tests/training/test_checkpoint.py",),
    "data.tfrecord": ("tests/data/test_tfrecord.py",),
    "data.read.preprocessing": (
        "tests/data/read/test_preprocessing.py",
        "tests/data/read/test_preprocessing_knobs.py",
        "tests/data/read/test_preprocessing_units.py",
    ),
    "data.read.reader": ("tests/data/read/test_reader.py", "tests/data/read/test_reader_units.py"),
    "data.read.ranks": ("tests/data/test_source_ranks.py", "tests/data/read/test_reader.py"),
}
EQUIVALENT_DIR = ROOT / "scripts" / "mutation_equivalent"
PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=")
MARKERS = {"tensorflow": "not slow", "jax": "backend_agnostic and not slow"}
# Modules with code only the JAX backend runs (TensorFlow refuses `stateless_apply`): their
# survivors on TensorFlow are run again on JAX, and a mutant either backend kills is killed.
ALSO_JAX = {"training.precision"}


@dataclass
class Outcome:
    mutant: str
    line: int
    change: str
    status: str  # killed | survived | timeout | equivalent-killed | equivalent
    seconds: float


@dataclass
class ModuleReport:
    module: str
    tests: tuple[str, ...]
    baseline_seconds: float
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, *statuses: str) -> int:
        return sum(o.status in statuses for o in self.outcomes)

    @property
    def score(self) -> float | None:
        counted = self.count("killed", "survived", "timeout")
        return None if counted == 0 else self.count("killed", "timeout") / counted


def read_equivalent(folder: Path = EQUIVALENT_DIR) -> dict[str, str]:
    """`mutant id -> reason` from the folder's `*.txt` files, lines `ID  # reason`.

    Blank lines and lines starting with `#` are ignored; an id without a reason, or listed
    twice, is an error naming the file and line.
    """
    equivalent: dict[str, str] = {}
    for path in sorted(folder.glob("*.txt")):
        for number, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            mutant_id, sep, reason = line.partition("#")
            mutant_id = mutant_id.strip()
            if not sep or not reason.strip() or " " in mutant_id:
                raise ValueError(f"{path}:{number}: expected 'ID  # reason', got {raw!r}")
            if mutant_id in equivalent:
                raise ValueError(f"{path}:{number}: {mutant_id} is listed twice")
            equivalent[mutant_id] = reason.strip()
    return equivalent


class _MutantFinder:
    """An import hook serving one module from a compiled (mutated) code object."""

    def __init__(self, fullname: str, code, path: str) -> None:
        self.fullname, self.code, self.path = fullname, code, path

    def find_spec(self, fullname, path=None, target=None):
        import importlib.util

        if fullname != self.fullname:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=self.path)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        module.__file__ = self.path
        exec(self.code, module.__dict__)


def _child(module: str, tests: tuple[str, ...], mutant: tuple | None, run: Run) -> None:
    """In the forked child: install the hook, run the tests, exit with pytest's code.

    `mutant`: `(code, text)`: the mutated module as text with every line in place (code
    None), or, when no such text could be made, only compiled from its tree. The text is
    written to a scratch file (outside the checkout) and compiled under that name, so that
    AutoGraph (tf.data maps, tf.function), which re-reads a function's source file to
    convert it, converts the mutant and not the module's file. (A `linecache` entry is not
    enough: TensorFlow refreshes it from disk.)
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    if mutant is not None:
        code, text = mutant
        path = str(ROOT / "cvbench" / (module.replace(".", "/") + ".py"))
        if text is not None:
            source_file = os.path.join(run.scratch, f"{module}.{os.getpid()}.py")
            with open(source_file, "w", encoding="utf-8") as f:
                f.write(text)
            code = compile(text, source_file, "exec", dont_inherit=True)
        sys.meta_path.insert(0, _MutantFinder(f"cvbench.{module}", code, path))
    import pytest

    os.chdir(ROOT)
    rc = pytest.main([*tests, *run.pytest_args])
    os._exit(int(rc))


def sample_mutants(mutants: list[Mutant], n: int | None, seed: int) -> list[Mutant]:
    """`n` mutants drawn with `seed` (all when `n` is None or larger), in source order."""
    if n is None or n >= len(mutants):
        return mutants
    chosen = random.Random(seed).sample(range(len(mutants)), n)
    return [mutants[i] for i in sorted(chosen)]


@dataclass(frozen=True)
class Run:
    """How each child runs: the pytest arguments (per backend) and the scratch folder."""

    pytest_args: tuple[str, ...]
    scratch: str


def _spawn(run: Run, module: str, tests: tuple[str, ...], mutant: tuple | None) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _child(module, tests, mutant, run)
        finally:
            os._exit(3)
    return pid


def _status(module: str, wait_status: int, what: str) -> str:
    rc = os.waitstatus_to_exitcode(wait_status)
    if rc == 5:  # no test collected: a wrong target, never a kill
        raise RuntimeError(f"{module}: pytest collected no tests ({what})")
    return "survived" if rc == 0 else "killed"


def baseline_seconds(run: Run, module: str, tests: tuple[str, ...]) -> float:
    """Runs the unmutated tests; their time (an error if they fail or take over 10 min)."""
    start = time.monotonic()
    pid = _spawn(run, module, tests, None)
    while True:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > 600:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise RuntimeError(f"{module}: its tests take over 10 minutes without any mutant")
        select.select([], [], [], 0.02)
    if _status(module, wait_status, "unmutated") != "survived":
        raise RuntimeError(f"{module}: its tests fail without any mutant ({' '.join(tests)})")
    return time.monotonic() - start


def run_mutants(
    run: Run, module: str, mutants: list[Mutant], *, jobs: int, timeout: float, progress
) -> dict[str, tuple[str, float]]:
    """Every mutant in a child, `jobs` at a time: `id -> (status, seconds)`."""
    tests = TARGETS[module]
    path = ROOT / "cvbench" / (module.replace(".", "/") + ".py")
    source = path.read_text()
    pending = list(mutants)
    running: dict[int, tuple[Mutant, float]] = {}
    results: dict[str, tuple[str, float]] = {}

    def done(m: Mutant, status: str, seconds: float) -> None:
        results[m.id] = (status, seconds)
        progress(m, status)

    while pending or running:
        while pending and len(running) < jobs:
            m = pending.pop(0)
            text = mutated_source(source, m)  # compiled in the child
            mutant = (None if text is not None else compile_mutant(source, m, str(path)), text)
            running[_spawn(run, module, tests, mutant)] = (m, time.monotonic())
        pid, wait_status = os.waitpid(-1, os.WNOHANG)
        now = time.monotonic()
        if pid == 0:
            for p, (m, t0) in list(running.items()):
                if now - t0 > timeout:
                    os.kill(p, signal.SIGKILL)
                    os.waitpid(p, 0)
                    del running[p]
                    done(m, "timeout", now - t0)
            select.select([], [], [], 0.02)
            continue
        if pid in running:
            m, t0 = running.pop(pid)
            done(m, _status(module, wait_status, f"mutant {m.id}"), now - t0)
    return results


def jax_pass(module: str, ids: list[str], *, jobs: int) -> dict[str, str]:
    """The JAX backend's verdict on `ids` (a fresh process: Keras picks its backend once)."""
    with tempfile.TemporaryDirectory(prefix="cvbench-mutation-jax-") as tmp:
        report = Path(tmp) / "jax.json"
        cmd = [sys.executable, __file__, module, "--backend", "jax", "--jobs", str(jobs)]
        done = subprocess.run(
            [*cmd, "--json", str(report), "--only", *ids],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{module}: the JAX pass failed:\n{done.stdout[-3000:]}")
        outcomes = json.loads(report.read_text())["modules"][0]["outcomes"]
    return {o["mutant"]: o["status"] for o in outcomes}


def run_module(
    run: Run,
    module: str,
    *,
    sample: int | None,
    seed: int,
    jobs: int,
    equivalent: dict[str, str],
    only: set[str] | None,
    progress,
    backend: str,
) -> ModuleReport:
    tests = TARGETS[module]
    path = ROOT / "cvbench" / (module.replace(".", "/") + ".py")
    mutants = find_mutants(path.read_text(), module)
    if only is not None:  # any mutant of the module, sampled or not
        mutants = [m for m in mutants if m.id in only]
    else:
        mutants = sample_mutants(mutants, sample, seed)
    baseline = baseline_seconds(run, module, tests)
    report = ModuleReport(module, tests, round(baseline, 2))
    quiet = module in ALSO_JAX and backend == "tensorflow"  # verdict after the JAX pass

    def show(m: Mutant, status: str) -> None:
        if not quiet:
            progress(_outcome(m, status, 0.0, equivalent))

    results = run_mutants(run, module, mutants, jobs=jobs, timeout=3 * baseline + 10, progress=show)
    if quiet:
        survivors = [m.id for m in mutants if results[m.id][0] == "survived"]
        if survivors:
            print(f"  {len(survivors)} survivors again on JAX (backend_agnostic tests)", flush=True)
            for mutant_id, status in jax_pass(module, survivors, jobs=jobs).items():
                if status in ("killed", "timeout", "equivalent-killed"):
                    results[mutant_id] = ("killed", results[mutant_id][1])
        for m in mutants:
            show(m, results[m.id][0])
    report.outcomes = [_outcome(m, *results[m.id], equivalent) for m in mutants]
    return report


def _outcome(m: Mutant, status: str, seconds: float, equivalent: dict[str, str]) -> Outcome:
    if m.id in equivalent:
        status = "equivalent" if status == "survived" else "equivalent-killed"
    return Outcome(m.id, m.line, m.change, status, round(seconds, 2))


def format_table(reports: list[ModuleReport]) -> str:
    head = f"{'module':24} {'tried':>5} {'killed':>6} {'surv.':>5} {'t/out':>5} {'equiv':>5} score"
    lines = [head, "-" * len(head)]
    totals = [0, 0, 0, 0, 0]
    for r in reports:
        row = [
            len(r.outcomes),
            r.count("killed"),
            r.count("survived"),
            r.count("timeout"),
            r.count("equivalent"),
        ]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        score = "-" if r.score is None else f"{100 * r.score:.1f}%"
        cells = f"{row[0]:5} {row[1]:6} {row[2]:5} {row[3]:5} {row[4]:5}"
        lines.append(f"{r.module:24} {cells} {score}")
    counted = totals[1] + totals[2] + totals[3]
    total_score = f"{100 * (totals[1] + totals[3]) / counted:.1f}%" if counted else "-"
    lines.append("-" * len(head))
    t = totals
    lines.append(f"{'all':24} {t[0]:5} {t[1]:6} {t[2]:5} {t[3]:5} {t[4]:5} {total_score}")
    return "\n".join(lines)


def format_survivors(reports: list[ModuleReport]) -> str:
    lines = []
    for r in reports:
        for o in r.outcomes:
            if o.status == "survived":
                lines.append(f"survived  {o.mutant}  (line {o.line}: {o.change})")
            elif o.status == "equivalent-killed":
                lines.append(f"STALE equivalent (a test kills it): {o.mutant}")
    return "\n".join(lines)


def select_modules(names: list[str]) -> list[str]:
    if not names:
        return list(TARGETS)
    chosen = []
    for name in names:
        hits = [m for m in TARGETS if m == name or m.startswith(name + ".")]
        if not hits:
            raise SystemExit(f"mutation: unknown module {name!r}; known: {', '.join(TARGETS)}")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def warm_imports(backend: str) -> None:
    """Imports the heavy third-party libraries once, in the parent, before any fork."""
    os.environ["KERAS_BACKEND"] = backend
    import keras  # noqa: F401
    import numpy  # noqa: F401
    import pytest  # noqa: F401
    import tensorflow  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules under cvbench/ (default: all)")
    parser.add_argument("--sample", type=int, default=60, help="mutants per module (default 60)")
    parser.add_argument("--all", action="store_true", help="every mutant, no sampling")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", nargs="+", help="just these mutant ids (sampled or not)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--json", help="write the full report here")
    parser.add_argument("--backend", default="tensorflow", choices=("tensorflow", "jax"))
    args = parser.parse_args(argv)
    modules = select_modules(args.modules)
    sample = None if args.all else args.sample
    if args.list:
        for module in modules:
            path = ROOT / "cvbench" / (module.replace(".", "/") + ".py")
            for m in sample_mutants(find_mutants(path.read_text(), module), sample, args.seed):
                print(f"{m.id}  (line {m.line}: {m.change})")
        return 0
    equivalent = read_equivalent()
    warm_imports(args.backend)
    started = time.monotonic()

    def progress(o: Outcome) -> None:
        if o.status != "killed":
            print(f"  {o.status:10} {o.mutant}  (line {o.line}: {o.change})", flush=True)

    reports = []
    with tempfile.TemporaryDirectory(prefix="cvbench-mutation-") as scratch:
        run = Run((*PYTEST_ARGS, "-m", MARKERS[args.backend]), scratch)
        for module in modules:
            print(f"{module}: {' '.join(TARGETS[module])}", flush=True)
            report = run_module(
                run,
                module,
                sample=sample,
                seed=args.seed,
                jobs=args.jobs,
                equivalent=equivalent,
                only=set(args.only) if args.only else None,
                progress=progress,
                backend=args.backend,
            )
            reports.append(report)
            print(format_table([report]).splitlines()[2], flush=True)
    print()
    print(format_table(reports))
    survivors = format_survivors(reports)
    if survivors:
        print()
        print(survivors)
    minutes = (time.monotonic() - started) / 60
    print(f"\n{minutes:.1f} min, --jobs {args.jobs}, --seed {args.seed}, sample {sample or 'all'}")
    if args.json:
        data = {
            "seed": args.seed,
            "sample": sample,
            "modules": [
                {**asdict(r), "score": r.score, "outcomes": [asdict(o) for o in r.outcomes]}
                for r in reports
            ],
        }
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
