"""`cvbench train --eval-count N`: N evaluations evenly over the run, recorded in the epoch
logs (train_log.jsonl, TensorBoard), the last one at the end and printed."""

from __future__ import annotations

import json

import pytest
from test_train_cli import write_tiny_imagenet

import cvbench.cli as cli


@pytest.fixture(autouse=True)
def with_train_command(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))


@pytest.mark.slow
def test_eval_count_evaluates_evenly_and_records_each_evaluation(tmp_path, capsys):
    data = write_tiny_imagenet(tmp_path / "imagenet")  # 8 training, 6 validation images
    run = tmp_path / "run"
    argv = ["train", "--model", "resnet18", "--data-dir", str(data), "--batch-size", "2",
            "--image-size", "32", "--num-classes", "4", "--precision", "fp32", "--epochs", "3",
            "--steps-per-epoch", "1", "--eval-count", "2", "--log-dir", str(run),
            "--log-every", "0", "--no-progress", "--no-export", "--seed", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    events = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    epochs = [e for e in events if e["event"] == "epoch"]
    # 2 evaluations over 3 epochs: after epochs ceil(1 x 3 / 2) = 2 and ceil(2 x 3 / 2) = 3.
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    assert ["val_top1" in e for e in epochs] == [False, True, True]
    # 6 validation images: top-1 is a multiple of 1/6; no top-5 of 4 classes (always right).
    last = epochs[-1]
    assert round(last["val_top1"] * 6, 4) == round(last["val_top1"] * 6) and "val_top5" not in last
    assert f"top1: {last['val_top1']:.6g}" in out


BASE = ["train", "--model", "resnet18", "--synthetic", "--batch-size", "2", "--image-size", "32",
        "--num-classes", "4", "--precision", "fp32", "--epochs", "3", "--steps-per-epoch", "1",
        "--no-progress", "--no-export"]  # fmt: skip


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--eval-count", "2", "--eval", "none"], "--eval-count replaces --eval; drop --eval none"),
        (["--eval-count", "5"], "eval_count must be between 1 and the run's 3 epochs"),
    ],
)
def test_bad_eval_counts_give_one_line_and_exit_2(extra, message, capsys):
    assert cli.main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    # (after the no --log-dir notice: the epochs are known once the run is planned)
    last = err.strip().splitlines()[-1]
    assert last.startswith("cvbench: error: ") and message in last and "Traceback" not in err


def test_eval_count_zero_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([*BASE, "--eval-count", "0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--eval-count" in err and "positive integer" in err and "Traceback" not in err


@pytest.mark.slow
def test_ssd320_eval_count_logs_coco_ap_each_time(tmp_path, legacy_h5, capsys):
    # NVIDIA's SSD `eval_count` on tiny COCO records (two images, one box each, val = train):
    # SSD320 v1.2's recipe with a random ResNet-50 backbone file at 64 px, 2 evaluations over
    # 2 epochs: after epochs ceil(1 x 2 / 2) = 1 and ceil(2 x 2 / 2) = 2, each COCOeval's 12
    # numbers in the epoch's logs and TensorBoard, the last printed.
    import keras
    import tensorflow as tf
    from coco_records import build_two_image_coco

    records = build_two_image_coco(tmp_path / "coco", {3: "car", 90: "bus"})
    notop = keras.applications.ResNet50(weights=None, include_top=False)
    weights = legacy_h5(notop, tmp_path / "notop.h5", 3)
    run = tmp_path / "run"
    argv = ["train", "--model", "ssd320", "--data-dir", str(records), "--backbone-weights",
            str(weights), "--image-size", "64", "--batch-size", "2", "--epochs", "2",
            "--steps-per-epoch", "1", "--eval-count", "2", "--precision", "fp32",
            "--log-dir", str(run), "--log-every", "0", "--no-progress", "--no-export",
            "--seed", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    events = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    epochs = [e for e in events if e["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    coco_keys = {f"val_{k}" for k in ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10",
                                       "AR100", "ARs", "ARm", "ARl")}  # fmt: skip
    for epoch in epochs:
        assert coco_keys <= set(epoch), sorted(epoch)
        assert -1.0 <= epoch["val_AP"] <= 1.0  # COCOeval's -1: no ground truth of that size
    assert "Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ]" in out
    steps = []
    for path in sorted((run / "tensorboard").rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            steps += [event.step for v in event.summary.value if v.tag == "epoch/val_AP"]
    assert len(steps) == 2 and steps == sorted(steps), steps
