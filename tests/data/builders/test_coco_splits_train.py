"""A folder built from a user's own train and val JSON files in two `build-coco` calls is
what `cvbench train --model ssd320` and `cvbench eval` read: training on train, COCO
evaluation on val (#39 item 7)."""

from __future__ import annotations

import json

import pytest
from test_coco_splits import build, user_split

import cvbench.cli as cli


@pytest.mark.slow
def test_ssd_trains_on_train_and_evaluates_on_val_of_a_folder_built_in_two_calls(
    tmp_path, legacy_h5, capsys
):
    import keras

    # Train: 4 images (ids 1..4); val: 3 images with other ids (101..103), so the evaluated
    # images say which split the evaluation read.
    train = user_split(tmp_path / "raw", "train", 4)
    val = user_split(tmp_path / "raw", "val", 3, seed=1)
    data = json.loads(val.read_text())
    for image, ann in zip(data["images"], data["annotations"], strict=True):
        image["id"] = ann["image_id"] = image["id"] + 100
    val.write_text(json.dumps(data))
    out = tmp_path / "records"
    assert build(out, ("train", train)) == 0
    assert build(out, ("val", val)) == 0
    notop = keras.applications.ResNet50(weights=None, include_top=False)
    weights = legacy_h5(notop, tmp_path / "notop.h5", 3)
    run = tmp_path / "run"
    capsys.readouterr()
    argv = ["train", "--model", "ssd320", "--data-dir", str(out), "--backbone-weights",
            str(weights), "--image-size", "64", "--batch-size", "2", "--epochs", "1",
            "--steps-per-epoch", "1", "--eval-count", "1", "--precision", "fp32",
            "--log-dir", str(run), "--log-every", "0", "--no-progress", "--no-export",
            "--seed", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    assert "epoch 1: loss" in capsys.readouterr().out
    events = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    epochs = [e for e in events if e["event"] == "epoch"]
    # The evaluation during training ran COCOeval on val's ground truth (instances_val.json,
    # ids 101..103): detections of train's images (ids 1..4) would not load against it.
    assert len(epochs) == 1 and -1.0 <= epochs[0]["val_AP"] <= 1.0
    results = tmp_path / "eval.json"
    argv = ["eval", "--model", "ssd320", "--data-dir", str(out), "--checkpoint", str(run),
            "--image-size", "64", "--batch-size", "2", "--json", str(results)]  # fmt: skip
    assert cli.main(argv) == 0
    assert "AP50: " in capsys.readouterr().out
    metrics = json.loads(results.read_text())
    assert metrics["AP"] == pytest.approx(epochs[0]["val_AP"], abs=1e-6)
