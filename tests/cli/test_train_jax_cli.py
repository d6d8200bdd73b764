"""`cvbench train --backend jax` on 4 CPU devices (a subprocess: `JAX_NUM_CPU_DEVICES` must be
set before JAX starts), and the clean errors of --backend / --devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cvbench.cli as cli

ROOT = Path(__file__).resolve().parent.parent.parent
TINY = ["--model", "resnet18", "--synthetic", "--batch-size", "8", "--image-size", "32"]
TINY += ["--num-classes", "4", "--precision", "fp32", "--seed", "0"]


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))


@pytest.mark.slow
def test_train_on_four_cpu_devices_through_the_cli(tmp_path):
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="4", PYTHONPATH=str(ROOT))
    env.pop("KERAS_BACKEND", None)  # --backend sets it
    argv = [sys.executable, "-m", "cvbench", "train", "--backend", "jax", *TINY]
    argv += ["--steps-per-epoch", "2", "--epochs", "1", "--log-every", "1", "--burn-in", "1"]
    argv += ["--no-progress", "--no-export", "--eval", "none", "--log-dir", str(tmp_path)]
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # Batch 8 per process, 1 process, 4 devices: 2 images per device.
    assert "global batch 8 = 1 x 8" in run.stdout
    assert "(over 4 devices: 2 images per device)" in run.stdout
    events = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    start = next(e for e in events if e["event"] == "start")
    assert start["devices"] == 4 and start["ranks"] == 1 and start["global_batch"] == 8
    assert (tmp_path / "checkpoints" / "ckpt-0000000002.npz").is_file()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--devices", "2"], "--devices is for the JAX backend (--backend jax), not tensorflow"),
        (["--backend", "jax"], "--backend jax: Keras already runs the tensorflow backend"),
    ],
)
def test_backend_flags_give_one_line_and_exit_2(flags, message, capsys):
    # This suite's Keras runs on TensorFlow (the tests not marked backend_agnostic).
    assert cli.main(["train", *TINY, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.slow
def test_the_benchmark_trains_on_every_device_and_says_so(tmp_path):
    # `cvbench benchmark` on the JAX backend: the Trainer's keras.distribution path, the
    # global batch of 8 over 2 CPU devices; images/s count all of them
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="2", KERAS_BACKEND="jax", PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "cvbench", "benchmark", *TINY, "--steps", "2", "--burn-in",
            "1", "--log-every", "1", "--json", str(tmp_path / "bench.json")]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=500)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "devices: 2 (jax; images/s over all of them)" in run.stdout
    summary = json.loads((tmp_path / "bench.json").read_text())
    assert (summary["devices"], summary["ranks"], summary["global_batch"]) == (2, 1, 8)
    assert summary["mean"] > 0
