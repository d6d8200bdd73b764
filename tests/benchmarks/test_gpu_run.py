"""`benchmarks/gpu_run.sh`, the prepared GPU run, at tiny sizes on the CPU (`TINY=1`) with
TensorFlow imports failing as on the GPU machine (which has none): every case runs and writes
its JSON, the determinism pairs are compared, the grain case generates records without
TensorFlow and trains from them through grain beside the synthetic batch, and the summary
table is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_run_runs_every_case_without_tensorflow(tmp_path):
    blocker = tmp_path / "no_tf" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no TensorFlow on the GPU machine')\n")
    out = tmp_path / "out"
    env = dict(
        os.environ,
        OUT=str(out),
        TINY="1",
        BUDGET="1500",
        PYTHON=sys.executable,
        PYTHONPATH=str(blocker.parent),
    )
    env.pop("KERAS_BACKEND", None)  # the script sets jax
    run = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_run.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=1600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    names = sorted(p.name for p in out.iterdir())
    cases = ("bf16", "fp16", "fp16_deterministic", "fp16_distribution")
    benches = [f"bench_{case}.json" for case in cases]
    outputs = [*benches, "determinism.json", "grain.json", "log.txt", "suite.json", "suite.md"]
    assert names == sorted(outputs)
    # grain: 16 records at batch 4, 4 steps an epoch, 2 epochs from records and synthetic
    grain = json.loads((out / "grain.json").read_text())
    for name in ("grain", "synthetic"):
        assert grain[name]["global_batch"] == 4 and grain[name]["mean"] > 0, name
    assert grain["ratio"] == grain["grain"]["mean"] / grain["synthetic"]["mean"]
    assert "grain records vs synthetic: " in run.stdout
    # XLA:CPU is deterministic: both pairs are identical here (on the H200 the seed-only pair
    # differed); 1 epoch of 3 steps, checkpoints at steps 2 and 3.
    for flags, result in json.loads((out / "determinism.json").read_text()).items():
        assert result["identical"] and result["checkpoints"] == 2 and result["steps"] == 3, flags
    for name in benches:
        result = json.loads((out / name).read_text())
        assert result["devices"] == 1 and result["global_batch"] == 4 and result["mean"] > 0
    log = (out / "log.txt").read_text()
    assert "devices: 1 (jax; images/s over all of them)" in log  # --devices 1
    assert "devices: 1 (single; images/s over all of them)" in log  # auto on one device
    suite = json.loads((out / "suite.json").read_text())
    assert {r["model"] for r in suite["throughput"]} == {"resnet50", "ssd320"}
    assert "| fp16_distribution |" in run.stdout
    assert "determinism, --deterministic --seed 1: identical=True" in run.stdout


def _run(tmp_path, **variables) -> subprocess.CompletedProcess:
    blocker = tmp_path / "no_tf" / "tensorflow"
    blocker.mkdir(parents=True, exist_ok=True)
    (blocker / "__init__.py").write_text("raise ImportError('no TensorFlow on the GPU machine')\n")
    env = dict(os.environ, TINY="1", PYTHON=sys.executable, PYTHONPATH=str(blocker.parent))
    env.update(variables)
    env.pop("KERAS_BACKEND", None)
    return subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_run.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_an_unknown_case_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "out"
    run = _run(tmp_path, OUT=str(out), CASES="grain,sweeep")
    assert run.returncode == 2
    assert "unknown case 'sweeep' in CASES" in run.stdout
    assert not out.exists()  # refused before the results folder (and its log) is made


def test_cases_selects_what_runs_and_the_sweep_runs_inside_the_budget(tmp_path):
    """`CASES=sweep` runs only the sweep (with `SWEEP_CASES`), under OUT/sweep, and none of
    the default cases: what the next GPU lease runs beside grain (the two open GPU items)."""
    out = tmp_path / "out"
    run = _run(tmp_path, OUT=str(out), BUDGET="800", CASES="sweep", SWEEP_CASES="baseline")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "sweep"]
    sweep = json.loads((out / "sweep" / "sweep.json").read_text())
    rows = sweep["results"] if isinstance(sweep, dict) else sweep
    assert [r["case"] for r in rows] == ["baseline"]
    assert rows[0]["images_per_sec"] > 0
    for skipped in ("== determinism", "== bench_", "== grain", "== suite"):
        assert skipped not in run.stdout
    assert "| baseline |" in run.stdout  # the summary prints the sweep's table
