"""`cvbench train --backend jax --data-backend grain` killed with a real SIGKILL mid-epoch,
then resumed with `--resume`, in a process where TensorFlow cannot be imported: every step's
loss and the final weights are bit-identical to a run that was never killed. The resume
returns to the checkpoint's batch of the epoch through grain's iterator state
(`GrainBatches.iterate_from`), reading none of the batches before it (slow: subprocesses)."""

from __future__ import annotations

from pathlib import Path

import pytest
from grain_runs import (
    assert_same_run,
    final_state,
    finish,
    kill_at_hold,
    start_train,
    tensorflow_blocker,
)

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
    return tensorflow_blocker(tmp_path_factory.mktemp("no_tf"))


def _train(records, log_dir, blocker, *extra, hold=None):
    return start_train([*FLAGS, "--data-dir", str(records)], log_dir, blocker, *extra, hold=hold)


@pytest.fixture(scope="module")
def reference(records, no_tensorflow, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("grain_reference")
    finish(_train(records, log_dir, no_tensorflow))
    return final_state(log_dir, 12)


@pytest.mark.slow
@pytest.mark.parametrize("kill_after, resumed_at", [(9, 8), (5, 4)], ids=["epoch2", "epoch1"])
def test_sigkill_mid_epoch_then_resume_on_grain_is_bit_identical(
    kill_after, resumed_at, records, no_tensorflow, reference, tmp_path
):
    killed = _train(records, tmp_path, no_tensorflow, hold=f"after_step:{kill_after}")
    kill_at_hold([killed], kill_after)
    out = finish(_train(records, tmp_path, no_tensorflow, "--resume"))
    assert f"(step {resumed_at})" in out, out[-2000:]
    assert_same_run(final_state(tmp_path, 12), reference, 12)
