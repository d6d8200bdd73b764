"""`cvbench train` ends its run folder with its results (#39 item 6), end to end: a
classifier with its export (the model files listed in results.json and the last line) and
SSD320 on tiny COCO records (COCO AP per epoch and per class, plotted)."""

from __future__ import annotations

import json

import pytest

import cvbench.cli as cli
from cvbench.tasks.runner import written_line

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def with_train_command(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))


@pytest.mark.heavy
def test_train_writes_results_plots_and_says_where(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--model", "resnet18", "--synthetic", "--batch-size", "2", "--image-size",
            "32", "--num-classes", "3", "--precision", "fp32", "--epochs", "2",
            "--steps-per-epoch", "2", "--log-dir", str(run), "--log-every", "0",
            "--no-progress", "--seed", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    record = json.loads((run / "results.json").read_text())
    model = record["files"]["model"]
    # every model file of export/ (model.keras, and the SavedModel under its current name)
    assert "export/model.keras" in model and len(model) >= 2
    assert all((run / name).exists() and "/." not in name for name in model), model
    assert record["files"]["checkpoint"] == "checkpoints/ckpt-0000000004.npz"
    assert record["files"]["plots"] == ["plots/training.png"]
    assert (run / "plots/training.png").read_bytes()[:8] == PNG
    # The printed results are the recorded ones; the last line says where everything is.
    assert out[-3:-1] == [f"{k}: {record['metrics'][k]:.6g}" for k in ("loss", "top1")]  # 3 classes
    assert out[-1] == written_line(run, record)
    assert "model " + ", ".join(f"{run}/{name}" for name in model) in out[-1]


@pytest.mark.heavy
def test_ssd320_run_records_and_plots_ap_per_class(tmp_path, legacy_h5, capsys):
    # Tiny COCO records (two images, one box each: a car and a bus), SSD320 v1.2 at 64 px with
    # a random ResNet-50 backbone file, 2 epochs of 1 step, evaluated after each.
    import keras
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
    out = capsys.readouterr().out.strip().splitlines()
    record = json.loads((run / "results.json").read_text())
    metrics = record["metrics"]
    assert {"AP", "AP50", "AP/car", "AP/bus"} <= set(metrics) and record["task"] == "detection"
    plots = record["files"]["plots"]
    assert plots[0] == "plots/training.png"
    # per_class_ap.png when a class has ground truth and so an AP >= 0 (both do here)
    assert plots[1:] == ["plots/per_class_ap.png"]
    for name in plots:
        assert (run / name).read_bytes()[:8] == PNG
    assert out[-1] == written_line(run, record)
