"""`cvbench train --deterministic` killed with a real SIGKILL, then resumed with `--resume`,
ends with the same weights and the same per-step losses as a run that was never killed:
mid-epoch, right after a checkpoint, and during a checkpoint write (slow: subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HOLD_CLI = Path(__file__).with_name("hold_cli.py")
ENV = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
# 6 classes x 4 training images = 24 records, batch 4: 6 steps an epoch, 12 in 2 epochs;
# checkpoints every 5 steps (5, 10) and at the epoch ends (6, 12).
FLAGS = [
    "train", "--model", "resnet18", "--image-size", "32", "--num-classes", "6",
    "--batch-size", "4", "--epochs", "2", "--checkpoint-every", "5", "--keep-checkpoints", "10",
    "--log-every", "1", "--burn-in", "0", "--deterministic", "--seed", "1", "--precision",
    "fp32", "--eval", "none", "--no-export", "--no-progress",
]  # fmt: skip


def _train(records: Path, log_dir: Path, *extra: str, hold: str | None = None):
    env = dict(ENV, CVBENCH_TEST_HOLD=hold) if hold else ENV
    argv = [sys.executable, str(HOLD_CLI), *FLAGS, "--data-dir", str(records)]
    argv += ["--log-dir", str(log_dir), *extra]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True
    )


def _kill_when(process: subprocess.Popen, marker: str, timeout: float = 300) -> list[str]:
    """Reads the process's output until a line starting with `marker`, then SIGKILLs it."""
    lines, deadline = [], time.time() + timeout
    for line in process.stdout:
        lines.append(line)
        if line.startswith(marker):
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            return lines
        if time.time() > deadline:
            break
    process.kill()
    raise AssertionError(f"never saw {marker!r}:\n" + "".join(lines[-40:]))


def _finish(process: subprocess.Popen) -> str:
    out, _ = process.communicate(timeout=600)
    assert process.returncode == 0, out[-3000:]
    return out


def _final_state(log_dir: Path) -> tuple[list[np.ndarray], dict[int, float]]:
    """The last checkpoint's arrays (step 12) and each step's last logged loss."""
    with np.load(log_dir / "checkpoints" / "ckpt-0000000012.npz") as data:
        arrays = [data[k] for k in sorted(data.files) if k != "meta"]
    losses = {}
    for line in (log_dir / "train_log.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("event") == "step":
            losses[entry["step"]] = entry["loss"]  # a replayed step: its resumed value
    return arrays, losses


@pytest.fixture(scope="module")
def reference(records, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("reference")
    _finish(_train(records, log_dir))
    return _final_state(log_dir)


# Each kill point, the line that triggers the kill, and where the resume must start.
KILLS = {
    "mid_epoch": ("after_step:8", "HOLD after_step 8", "step 6"),
    "right_after_a_checkpoint": ("after_write:5", "HOLD after_write 5", "step 5"),
    "during_a_checkpoint_write": ("in_write:10", "HOLD in_write 10", "step 6"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kill", sorted(KILLS))
def test_sigkill_then_resume_is_bit_identical(kill, records, reference, tmp_path):
    hold, marker, resumed_at = KILLS[kill]
    killed = _train(records, tmp_path, hold=hold)
    _kill_when(killed, marker)
    assert killed.returncode == -signal.SIGKILL
    if kill == "during_a_checkpoint_write":  # only the temporary file: no half checkpoint
        assert not (tmp_path / "checkpoints" / "ckpt-0000000010.npz").exists()
        assert list((tmp_path / "checkpoints").glob(".ckpt-0000000010.npz.*"))
    out = _finish(_train(records, tmp_path, "--resume"))
    assert f"resumed from {tmp_path / 'checkpoints'}" in out and f"({resumed_at})" in out
    arrays, losses = _final_state(tmp_path)
    ref_arrays, ref_losses = reference
    assert sorted(losses) == list(range(1, 13)) and losses == ref_losses  # exact floats
    assert len(arrays) == len(ref_arrays)
    for got, want in zip(arrays, ref_arrays, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_checkpoints_the_step_reached_and_resume_continues(
    signum, records, reference, tmp_path
):
    # What a cluster scheduler sends before preemption (SIGTERM), or Ctrl-C (SIGINT): the run
    # finishes its step, checkpoints it (there is no periodic checkpoint before step 5), exits
    # with 128 + the signal's number, and --resume continues at the next step, ending exactly
    # where a run that was never stopped ends.
    env = dict(ENV, CVBENCH_TEST_STEP_DELAY="0.5")  # each step 0.5 s longer: mid-epoch 1
    argv = [sys.executable, str(HOLD_CLI), *FLAGS, "--data-dir", str(records)]
    argv += ["--log-dir", str(tmp_path)]
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    for line in run.stdout:
        if line.split()[:2] == ["2", "1"]:  # the line of step 2, epoch 1
            break
    sent = time.monotonic()
    run.send_signal(signum)
    out, err = run.communicate(timeout=120)
    assert time.monotonic() - sent < 60
    assert run.returncode == 128 + signum, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("cvbench train:")]
    name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT"
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    step = int(lines[0].split("stopped after step ")[1].split(",")[0])
    checkpoint = tmp_path / "checkpoints" / f"ckpt-{step:010d}.npz"
    assert lines[0] == (
        f"cvbench train: {name} received: stopped after step {step}, checkpoint "
        f"{checkpoint} written; rerun with --resume to continue"
    )
    assert 2 <= step < 5  # mid-epoch, before the first periodic checkpoint (step 5)
    assert sorted(p.name for p in checkpoint.parent.glob("*.npz")) == [checkpoint.name]
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["event"] == "interrupted" and log[-1] == dict(log[-1], signal=name, step=step)
    resumed = _finish(_train(records, tmp_path, "--resume"))
    assert f"resumed from {tmp_path / 'checkpoints'}" in resumed and f"(step {step})" in resumed
    arrays, losses = _final_state(tmp_path)
    ref_arrays, ref_losses = reference
    assert losses == ref_losses  # every step once, exact floats (replayed steps: resumed value)
    for got, want in zip(arrays, ref_arrays, strict=True):
        np.testing.assert_array_equal(got, want)
