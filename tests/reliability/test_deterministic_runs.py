"""Two `cvbench train --deterministic --seed 1` runs of the same command, in two processes,
write bit-identical checkpoints and log bit-identical per-step losses: ResNet-18 on records
that `build-imagenet` made and SSD320 on synthetic data, each at batch 4 and 8, with and
without a step whose batch is NaN (the step must be skipped, and skipped alike).

Regression: 179d4e2 put the optimizer's update inside a `tf.cond` (whole-step semantics);
TensorFlow does not run a variable update under a conditional reproducibly, and two identical
runs ended 0.2 apart at step 6 (ResNet-18, batch 8) while the kill/resume test (batch 4) still
passed. The update now runs in its own graph, called only for finite gradients."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from compare_runs import read_run  # noqa: E402

HOLD_CLI = Path(__file__).with_name("hold_cli.py")
ENV = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
COMMON = [
    "--epochs", "2", "--checkpoint-every", "2", "--keep-checkpoints", "100", "--log-every", "1",
    "--burn-in", "0", "--deterministic", "--seed", "1", "--precision", "fp32", "--eval", "none",
    "--no-export", "--no-progress",
]  # fmt: skip


@pytest.fixture(scope="module")
def backbone(tmp_path_factory, legacy_h5) -> Path:
    import keras

    notop = keras.applications.ResNet50(weights=None, include_top=False)
    return legacy_h5(notop, tmp_path_factory.mktemp("backbone") / "notop.h5", 5)


def _argv(model: str, batch: int, records: Path, backbone: Path) -> list[str]:
    if model == "resnet18":
        data = ["--data-dir", str(records), "--image-size", "32", "--num-classes", "6"]
    else:  # 3 steps an epoch of seeded synthetic batches, from a (random) backbone file
        data = ["--synthetic", "--steps-per-epoch", "3", "--image-size", "64"]
        data += ["--num-classes", "3", "--backbone-weights", str(backbone)]
    return ["train", "--model", model, "--batch-size", str(batch), *data, *COMMON]


def _start(argv: list[str], log_dir: Path, nan_step: int | None) -> subprocess.Popen:
    env = dict(ENV, CVBENCH_TEST_NAN_STEPS=str(nan_step)) if nan_step else ENV
    return subprocess.Popen(
        [sys.executable, str(HOLD_CLI), *argv, "--log-dir", str(log_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )


CASES = [
    (model, batch, nan_step)
    for model in ("resnet18", "ssd320")
    for batch in (4, 8)
    for nan_step in (None, 2)
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, batch, nan_step",
    CASES,
    ids=[f"{m}-batch{b}-{'skip2' if n else 'noskip'}" for m, b, n in CASES],
)
def test_two_deterministic_runs_are_bit_identical(
    model, batch, nan_step, records, backbone, tmp_path
):
    argv = _argv(model, batch, records, backbone)
    runs = [_start(argv, tmp_path / name, nan_step) for name in ("a", "b")]  # side by side
    for run in runs:
        out, _ = run.communicate(timeout=900)
        assert run.returncode == 0, out[-3000:]
    (ckpt_a, steps_a), (ckpt_b, steps_b) = read_run(tmp_path / "a"), read_run(tmp_path / "b")
    per_epoch = 6 if (model == "resnet18" and batch == 4) else 3
    total = 2 * per_epoch
    assert sorted(steps_a) == list(range(1, total + 1))
    skipped = [step for step, (_, skip) in steps_a.items() if skip]
    assert skipped == ([nan_step] if nan_step else [])
    assert steps_a == steps_b  # exact floats
    # A checkpoint every 2 steps and at each epoch end.
    saved = [s for s in range(1, total + 1) if s % 2 == 0 or s % per_epoch == 0]
    assert sorted(ckpt_a) == sorted(ckpt_b) == [f"ckpt-{s:010d}.npz" for s in saved]
    for name, arrays in ckpt_a.items():
        assert sorted(arrays) == sorted(ckpt_b[name])
        for key, value in arrays.items():
            np.testing.assert_array_equal(value, ckpt_b[name][key], err_msg=f"{name} {key}")
