"""The probe's race: `cvbench eval --log-dir ce` while `cvbench train --log-dir ce` runs said
`wrote ce/results.json`, and the training's end replaced it. Now eval refuses a folder a live
run holds (the run holds it from its start to its results.json), and train refuses at its
start a folder whose results.json is an evaluation's."""

import json
import os
import subprocess
import sys
import time

import pytest

from cvbench.training.run_dir import RunFolder, run_holder, training_results
from cvbench.utils.files import record_output, written_by_cvbench

TRAIN = [
    "train", "--synthetic", "--model", "resnet18", "--image-size", "32", "--num-classes", "4",
    "--batch-size", "2", "--epochs", "1", "--precision", "fp32", "--no-progress",
    "--log-every", "0", "--seed", "0", "--eval", "end", "--no-export",
]  # fmt: skip


def _cvbench(*argv, cwd, **kwargs):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen(
        [sys.executable, "-m", "cvbench", *argv], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs,
    )  # fmt: skip


@pytest.mark.heavy
def test_eval_into_a_running_trainings_folder_is_refused_and_loses_nothing(tmp_path):
    (tmp_path / "c.npz").write_bytes(b"refused before it is read")
    train = _cvbench(*TRAIN, "--steps-per-epoch", "400", "--log-dir", "ce", cwd=tmp_path)
    deadline = time.monotonic() + 300
    while run_holder(tmp_path / "ce") is None:
        assert train.poll() is None, train.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    evaluation = _cvbench("eval", "--synthetic", "--checkpoint", "c.npz", "--log-dir", "ce",
                          cwd=tmp_path)  # fmt: skip
    out, err = evaluation.communicate(timeout=300)
    holder = json.loads(RunFolder(tmp_path / "ce").lock.read_text())
    assert (evaluation.returncode, out) == (1, "")
    assert err.splitlines()[-1] == (  # after TensorFlow's start-up lines, if any
        f"cvbench eval: error: ce is in use by a training run (pid {train.pid} on host "
        f"{holder['host']} since {holder['started']}); give eval another --log-dir"
    )
    assert "Traceback" not in err
    assert train.poll() is None  # refused while the run was still running
    train_out, train_err = train.communicate(timeout=600)
    assert train.returncode == 0, train_err
    assert "cvbench: wrote ce/results.json" in train_out
    results = RunFolder(tmp_path / "ce").results
    assert training_results(results) and written_by_cvbench(results)


@pytest.mark.heavy
def test_train_refuses_a_folder_holding_an_evaluations_results_before_training(tmp_path):
    folder = tmp_path / "e"
    folder.mkdir()
    evaluated = b'{"checkpoint": "c.npz", "metrics": {"top1": 0.25}}'
    (folder / "results.json").write_bytes(evaluated)
    record_output(folder / "results.json")
    train = _cvbench(*TRAIN, "--steps-per-epoch", "1", "--log-dir", "e", cwd=tmp_path)
    out, err = train.communicate(timeout=600)
    assert train.returncode == 2
    assert err.splitlines()[-1] == (
        "cvbench: error: e/results.json is not a training's results file (another command's "
        "results, written by cvbench): the run would replace it at its end; move it, or train "
        "in another log directory"
    )
    assert sorted(p.name for p in folder.iterdir()) == [".cvbench-outputs.json", "results.json"]
    assert (folder / "results.json").read_bytes() == evaluated
