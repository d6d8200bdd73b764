"""`cvbench train`'s up-front checks of probe P51.

F8: `--eval end` (the default), `--eval epoch` or `--eval-count` on records without a
validation split trained the whole run, wrote its checkpoints and export, then exited 2 when
the evaluation listed the split: refused before the first step now, nothing written.

F11: `--resume` into a folder without a checkpoint (a typo, or a requeued job's first run)
started a new run without a word: it still does (requeue scripts rely on it), with a warning.
"""

from __future__ import annotations

import argparse

import pytest
from jpeg_records import write_jpeg_records

import cvbench.cli as cli
from cvbench.cli.errors import CLIError
from cvbench.cli.train import check_evaluation_split

RUN = ["--model", "resnet18", "--image-size", "32", "--batch-size", "2", "--precision", "fp32"]
RUN += ["--num-classes", "4", "--steps-per-epoch", "1", "--epochs", "1", "--no-progress"]
RUN += ["--log-every", "0", "--no-export", "--seed", "0"]
WARNING = "cvbench train: warning: --resume: {} holds no checkpoint; starting a new run"


@pytest.fixture(scope="module")
def train_only(tmp_path_factory):
    """Records of a training split only (8 images, 4 classes): no validation shards."""
    records = tmp_path_factory.mktemp("train_only") / "records"
    write_jpeg_records(records / "train-00000-of-00001", 8, num_classes=4, prefix="train")
    return records


@pytest.mark.parametrize(
    ("flags", "when"),
    [
        ([], "--eval end evaluates on it; pass --eval none"),  # the default
        (["--eval", "epoch"], "--eval epoch evaluates on it; pass --eval none"),
        (
            ["--eval-count", "1"],
            "--eval-count 1 evaluates on it; pass --eval none without --eval-count",
        ),  # fmt: skip
    ],
)
def test_evaluating_without_a_validation_split_is_refused_before_training(
    train_only, tmp_path, capsys, flags, when
):
    run = tmp_path / "run"
    capsys.readouterr()
    code = cli.main(["train", *RUN, *flags, "--data-dir", str(train_only), "--log-dir", str(run)])
    captured = capsys.readouterr()
    assert code == 2  # before: the run trained, then exit 2 (the same after hours)
    assert captured.err.strip().splitlines() == [
        f"cvbench: error: {train_only} has no validation split to evaluate on (no TFRecord "
        f"files matching 'validation-?????-of-?????' in {train_only}; shard files present for: "
        f"train): {when} to train without evaluating"
    ]
    assert captured.out == ""  # no step, no banner
    assert not run.exists()  # nothing written: no checkpoint, no log, no export


def _detection_task(data_dir):
    """What the check reads of a DetectionTask on `data_dir`: its split and its files."""
    from cvbench.tasks.detection import DetectionTask

    class Task:
        name = "detection"
        evaluation_split = DetectionTask.evaluation_split
        options = argparse.Namespace(data_dir=str(data_dir))
        split_files = DetectionTask.split_files
        check_evaluation_split = DetectionTask.check_evaluation_split

    return Task()


def test_a_detection_run_looks_for_its_own_split(tmp_path):
    (tmp_path / "coco_train.record-00000-of-00001").write_bytes(b"")
    args = argparse.Namespace(data_dir=str(tmp_path), eval="end", eval_count=None)
    with pytest.raises(CLIError) as caught:
        check_evaluation_split(args, _detection_task(tmp_path))
    assert str(caught.value) == (
        f"{tmp_path} has no val split to evaluate on (no TFRecord files matching "
        f"'coco_val.record-?????-of-?????' in {tmp_path}; shard files present for: "
        "coco_train.record): --eval end evaluates on it; pass --eval none to train without "
        "evaluating"
    )
    (tmp_path / "coco_val.record-00000-of-00001").write_bytes(b"records")
    check_evaluation_split(args, _detection_task(tmp_path))  # found: no error
    check_evaluation_split(
        argparse.Namespace(data_dir=str(tmp_path), eval="none", eval_count=None),
        argparse.Namespace(name="classification"),
    )  # --eval none: not looked for


def test_resume_into_a_folder_without_a_checkpoint_warns_and_starts_the_run(
    train_only, tmp_path, capsys
):
    run = tmp_path / "typo"
    argv = ["train", *RUN, "--eval", "none", "--data-dir", str(train_only), "--log-dir", str(run)]
    capsys.readouterr()
    # --eval none trains on records without a validation split (F8's check is not in its way)
    assert cli.main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err.count(WARNING.format(run)) == 1  # before: no line said it
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["ckpt-0000000001.npz"]
    # a folder with a checkpoint is resumed from, without the warning
    assert cli.main([*argv, "--resume"]) == 0
    captured = capsys.readouterr()
    assert "holds no checkpoint" not in captured.err
    resumed = f"cvbench: resumed from {run}/checkpoints/ckpt-0000000001.npz (step 1)"
    assert resumed in captured.out.splitlines()
