"""Top-5 accuracy of a classifier of 5 classes or fewer is 1.0 whatever the model: it is not
reported (no `top5` key) by eval, its `--json` and `results.json`, the training's progress
line and validation logs alike. Before, `cvbench train --num-classes 4` printed `top5 1.0000`
and `cvbench eval` wrote `"top5": 1.0` as if it had been measured."""

from __future__ import annotations

import json

import pytest
from inference_models import channel_classifier, classifier_info
from jpeg_records import write_jpeg_records

import cvbench.cli as cli
from cvbench.inference import save_model
from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.tasks.classification import accuracy_metrics
from cvbench.training import TrainConfig

pytestmark = pytest.mark.backend_agnostic


@pytest.mark.parametrize(
    "classes, names",
    [(2, ["top1"]), (5, ["top1"]), (6, ["top1", "top5"]), (1000, ["top1", "top5"])],
)
def test_top5_is_reported_only_over_more_than_5_classes(classes, names):
    assert [m.name for m in accuracy_metrics(classes)] == names
    task = ClassificationTask(TaskOptions(model="resnet18", num_classes=classes))
    assert [m.name for m in task.metrics()] == names


def test_training_progress_and_validation_of_4_classes_show_no_top5(tmp_path, capsys):
    task = ClassificationTask(
        TaskOptions(model="resnet18", image_size=32, num_classes=4, synthetic_steps=2)
    )
    config = TrainConfig(log_dir=tmp_path / "run", log_every=0, progress_bar=False, export=False)
    run = prepare_run(task, batch_size=2, precision="fp32", config=config, distribution="single")
    results = run.fit(epochs=1, evaluate="epoch")
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("epoch 1:")]
    assert "top1" in line and "top5" not in line  # before: "top5 1.0000"
    assert set(results) == {"loss", "top1"}
    events = (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()
    (epoch,) = [e for e in map(json.loads, events) if e["event"] == "epoch"]
    assert "val_top1" in epoch and not any("top5" in key for key in epoch)


def test_cvbench_eval_of_3_classes_prints_and_writes_no_top5(tmp_path, capsys):
    model = save_model(channel_classifier(), tmp_path / "m.keras", classifier_info())
    write_jpeg_records(tmp_path / "rec" / "validation-00000-of-00001", 3, num_classes=3)
    out, folder = tmp_path / "r.json", tmp_path / "ev"
    argv = ["eval", "--checkpoint", str(model), "--data-dir", str(tmp_path / "rec"),
            "--batch-size", "2", "--model", "resnet18", "--num-classes", "3",
            "--image-size", "8", "--precision", "fp32", "--json", str(out),
            "--log-dir", str(folder)]  # fmt: skip
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert [x.split(":")[0] for x in printed.splitlines()[:2]] == ["loss", "top1"]
    assert "top5" not in printed  # before: "top5: 1"
    assert set(json.loads(out.read_text())) == {"loss", "top1"}
    assert set(json.loads((folder / "results.json").read_text())["metrics"]) == {"loss", "top1"}
