"""`cvbench train --backend jax --data-backend grain` killed with a real SIGKILL mid-epoch,
then resumed with `--resume`, in a process where TensorFlow cannot be imported: every step's
loss and the final weights are bit-identical to a run that was never killed. The resume
returns to the checkpoint's batch of the epoch through grain's iterator state
(`GrainBatches.iterate_from`), reading none of the batches before it (slow: subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HOLD_CLI = Path(__file__).with_name("hold_cli.py")
# 24 records (the `records` fixture), batch 4: 6 steps an epoch, 12 in 2 epochs; checkpoints
# every 4 steps (4, 8) and at the epoch ends (6, 12): a kill after step 5 resumes at step 4
# (batch 4 of epoch 1), one after step 9 at step 8 (batch 2 of epoch 2), both mid-epoch.
FLAGS = [
    "train", "--backend", "jax", "--data-backend", "grain", "--model", "resnet18",
    "--image-size", "32", "--batch-size", "4", "--epochs", "2", "--checkpoint-every", "4",
    "--keep-checkpoints", "10", "--log-every", "1", "--burn-in", "0", "--deterministic",
    "--seed", "1", "--precision", "fp32", "--eval", "none", "--no-export", "--no-progress",
]  # fmt: skip


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory) -> Path:
    """A folder whose `tensorflow` package fails to import (put first on PYTHONPATH)."""
    root = tmp_path_factory.mktemp("no_tf")
    (root / "tensorflow").mkdir()
    (root / "tensorflow" / "__init__.py").write_text("raise ImportError('no TensorFlow')\n")
    return root


def _train(records, log_dir, blocker, *extra, hold=None):
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONUNBUFFERED="1", PYTHONPATH=str(blocker))
    if hold:
        env["CVBENCH_TEST_HOLD"] = hold
    argv = [sys.executable, str(HOLD_CLI), *FLAGS, "--data-dir", str(records)]
    return subprocess.Popen(
        [*argv, "--log-dir", str(log_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )


def _finish(process) -> str:
    out, _ = process.communicate(timeout=900)
    assert process.returncode == 0, out[-3000:]
    return out


def _final_state(log_dir: Path):
    with np.load(log_dir / "checkpoints" / "ckpt-0000000012.npz") as data:
        arrays = [data[k] for k in sorted(data.files) if k != "meta"]
    losses = {}
    for line in (log_dir / "train_log.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("event") == "step":
            losses[entry["step"]] = entry["loss"]  # a replayed step: its resumed value
    return arrays, losses


@pytest.fixture(scope="module")
def reference(records, no_tensorflow, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("grain_reference")
    _finish(_train(records, log_dir, no_tensorflow))
    return _final_state(log_dir)


@pytest.mark.slow
@pytest.mark.parametrize("kill_after, resumed_at", [(9, 8), (5, 4)], ids=["epoch2", "epoch1"])
def test_sigkill_mid_epoch_then_resume_on_grain_is_bit_identical(
    kill_after, resumed_at, records, no_tensorflow, reference, tmp_path
):
    killed = _train(records, tmp_path, no_tensorflow, hold=f"after_step:{kill_after}")
    lines = []
    for line in killed.stdout:
        lines.append(line)
        if line.startswith(f"HOLD after_step {kill_after}"):
            killed.send_signal(signal.SIGKILL)
            break
    killed.wait(60)
    assert killed.returncode == -signal.SIGKILL, "".join(lines[-30:])
    out = _finish(_train(records, tmp_path, no_tensorflow, "--resume"))
    assert f"(step {resumed_at})" in out, out[-2000:]
    arrays, losses = _final_state(tmp_path)
    ref_arrays, ref_losses = reference
    assert sorted(losses) == list(range(1, 13)) and losses == ref_losses  # exact floats
    assert len(arrays) == len(ref_arrays)
    for got, want in zip(arrays, ref_arrays, strict=True):
        np.testing.assert_array_equal(got, want)
