"""A resume settles what the run is before anything reads the recipe.

`prepare_run` called `restore_from_checkpoint` (which takes the input normalization a moved
keras.applications weights file decided from the checkpoint, `model.weights_normalization`)
after the training pipeline had read the recipe's preprocessing: a resume after the file
moved trained on the recipe's default normalization (std about 58) while recording, printing
and exporting the checkpoint's (caffe: std 1), and its final weights differed from the
uninterrupted run's (review of 2026-12-05, finding 1).
"""

from __future__ import annotations

import os
import shutil

import keras
import numpy as np

from cvbench import cli
from cvbench.demo.shapes_data import write_classification_set
from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.training import TrainConfig
from cvbench.training.run_dir import RunFolder


def test_a_resume_restores_the_task_before_its_training_data_is_built(tmp_path):
    # A checkpoint file's name is what tells prepare_run that the run resumes.
    checkpoints = RunFolder(tmp_path).checkpoints
    checkpoints.mkdir(parents=True)
    (checkpoints / "ckpt-0000000001.npz").write_bytes(b"")
    options = TaskOptions(model="resnet18", image_size=32, num_classes=3, synthetic_steps=1)
    task = ClassificationTask(options)
    calls = []
    restore, train_data = task.restore_from_checkpoint, task.train_data
    task.restore_from_checkpoint = lambda **kw: (calls.append("restore"), restore(**kw))[1]
    task.train_data = lambda **kw: (calls.append("train_data"), train_data(**kw))[1]
    config = TrainConfig(log_dir=tmp_path, resume=True, progress_bar=False, export=False)
    prepare_run(task, batch_size=2, precision="fp32", config=config, distribution="single")
    assert calls == ["restore", "train_data"]


def test_a_fresh_run_restores_nothing(tmp_path):
    task = ClassificationTask(
        TaskOptions(model="resnet18", image_size=32, num_classes=3, synthetic_steps=1)
    )
    calls = []
    task.restore_from_checkpoint = lambda **kw: calls.append("restore")
    config = TrainConfig(log_dir=tmp_path, resume=True, progress_bar=False, export=False)
    prepare_run(task, batch_size=2, precision="fp32", config=config, distribution="single")
    assert calls == []  # resume of an empty folder: a fresh run


def _checkpoint(run):
    with np.load(run / "checkpoints" / "ckpt-0000000002.npz") as z:
        return {k: z[k].copy() for k in z.files}


def test_resume_after_the_keras_weights_file_moved_matches_the_uninterrupted_run(
    tmp_path, monkeypatch, legacy_h5
):
    """Heavy: three 2-step ResNet-50 runs at 32 px from records (about a minute)."""
    monkeypatch.chdir(tmp_path)
    model = keras.applications.ResNet50(weights=None, include_top=False)
    legacy_h5(model, tmp_path / "notop.h5", 3)  # keras.applications' layout: caffe inputs
    raw = write_classification_set(
        tmp_path / "raw", image_size=32, train_per_class=2, val_per_class=1, seed=0
    )
    build = ["build-imagenet", "--raw-dir", str(raw.path), "--train-shards", "1"]
    build += ["--val-shards", "1", "--workers", "1", "--no-progress", "--output-dir", "rec"]
    assert cli.main(build) == 0

    def train(run, *extra):
        argv = ["train", "--model", "resnet50", "--data-dir", "rec", "--weights", "notop.h5"]
        argv += ["--image-size", "32", "--batch-size", "2", "--epochs", "2"]
        argv += ["--steps-per-epoch", "1", "--precision", "fp32", "--eval", "none"]
        argv += ["--no-progress", "--log-every", "0", "--seed", "1", "--deterministic"]
        argv += ["--no-export", "--checkpoint-every", "1", "--log-dir", run, *extra]
        assert cli.main(argv) == 0

    train("whole")
    for name in ("kept", "moved"):  # as if killed after step 1
        shutil.copytree("whole", name)
        os.unlink(f"{name}/checkpoints/ckpt-0000000002.npz")
    train("kept", "--resume")
    os.rename("notop.h5", "elsewhere.h5")
    train("moved", "--resume")
    whole = _checkpoint(tmp_path / "whole")
    for name in ("kept", "moved"):
        resumed = _checkpoint(tmp_path / name)
        assert resumed.keys() == whole.keys()
        different = [k for k in whole if not np.array_equal(whole[k], resumed[k])]
        assert different == [], (name, different[:3])
