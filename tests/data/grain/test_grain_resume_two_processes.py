"""`cvbench train --backend jax --data-backend grain` on 2 processes (`jax.distributed` on
localhost, 2 CPU devices each), both killed with a real SIGKILL mid-epoch, then resumed with
`--resume`, TensorFlow unimportable: every step's loss and the final weights are bit-identical
to two processes that were never killed. Each process reads its own half of the records
through grain and returns to the checkpoint's batch of the epoch through grain's iterator
state (`GrainBatches.iterate_from`), as the 1-process test
(tests/reliability/test_grain_resume.py) does on one (slow: subprocesses)."""

from __future__ import annotations

import subprocess
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
from ports import free_port

# 24 records, 2 processes x batch 4 (global batch 8): 3 steps an epoch, 6 in 2 epochs;
# checkpoints every 2 steps (2, 4, 6) and at the epoch ends (3, 6): a kill after step 5
# resumes at step 4, batch 1 of epoch 2 (mid-epoch).
FLAGS = [
    "train", "--backend", "jax", "--data-backend", "grain", "--model", "resnet18",
    "--image-size", "32", "--batch-size", "4", "--epochs", "2", "--checkpoint-every", "2",
    "--keep-checkpoints", "10", "--log-every", "1", "--burn-in", "0", "--deterministic",
    "--seed", "1", "--precision", "fp32", "--eval", "none", "--no-export", "--no-progress",
]  # fmt: skip
STEPS, KILL_AFTER, RESUMED_AT = 6, 5, 4


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """`build-imagenet` records of the shapes set: 6 classes x 4 training images of 32 x 32
    in 2 shards (24 records: 12 for each process)."""
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("grain_2p_records")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=4, val_per_class=1, seed=0
    )
    out = root / "records"
    build_imagenet(raw.path, out, train_shards=2, val_shards=1, num_workers=1, progress=False)
    return out


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory) -> Path:
    return tensorflow_blocker(tmp_path_factory.mktemp("no_tf_2p"))


def _train(records, log_dir, blocker, *extra, hold=None) -> list[subprocess.Popen]:
    """Starts the 2 processes of one run (rank 0 checkpoints and logs into `log_dir`)."""
    env = dict(TF_CPP_MIN_LOG_LEVEL="3", JAX_NUM_CPU_DEVICES="2",
               KERAS_DISTRIBUTION_NUM_PROCESSES="2",
               KERAS_DISTRIBUTION_JOB_ADDRESSES=f"localhost:{free_port()}")  # fmt: skip
    argv = [*FLAGS, "--data-dir", str(records)]
    return [
        start_train(
            argv,
            log_dir,
            blocker,
            *extra,
            hold=hold,
            env=dict(env, KERAS_DISTRIBUTION_PROCESS_ID=str(rank)),
        )  # fmt: skip
        for rank in range(2)
    ]


def _finish(processes: list[subprocess.Popen]) -> list[str]:
    try:
        return [finish(p) for p in processes]
    finally:
        for p in processes:
            p.kill()


@pytest.mark.slow
def test_sigkill_of_both_processes_mid_epoch_then_resume_on_grain_is_bit_identical(
    records, no_tensorflow, tmp_path
):
    outputs = _finish(_train(records, tmp_path / "reference", no_tensorflow))
    assert "global batch 8 = 2 x 4" in outputs[0], outputs[0][-2000:]
    reference = final_state(tmp_path / "reference", STEPS)

    killed = _train(records, tmp_path / "run", no_tensorflow, hold=f"after_step:{KILL_AFTER}")
    kill_at_hold(killed, KILL_AFTER)  # rank 1 waits in the next step's collective for rank 0

    outputs = _finish(_train(records, tmp_path / "run", no_tensorflow, "--resume"))
    assert f"(step {RESUMED_AT})" in outputs[0], outputs[0][-2000:]
    assert_same_run(final_state(tmp_path / "run", STEPS), reference, STEPS)
