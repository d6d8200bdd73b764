"""`cvbench eval --log-dir DIR` ends its folder as a training run does (#39 item 6):
`results.json` (the metrics, the checkpoint, model, recipe, precision), a detector's AP per
class as `plots/per_class_ap.png`, and a last line saying what was written where; the folder
is checked before anything is loaded (never a link, never an input)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import cvbench.cli as cli
from cvbench.cli.evaluate import write_eval_results
from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.training import TrainConfig

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A resnet18 run of 1 epoch x 2 steps at 32 px, 3 classes: its checkpoint."""
    folder = tmp_path_factory.mktemp("run")
    options = TaskOptions(model="resnet18", image_size=32, num_classes=3, synthetic_steps=2,
                          settings={"epochs": 1})  # fmt: skip
    config = TrainConfig(log_dir=folder, log_every=0, progress_bar=False, export=False)
    run = prepare_run(ClassificationTask(options), batch_size=2, precision="fp32",
                      config=config, distribution="single")  # fmt: skip
    run.fit(evaluate="none")
    return folder / "checkpoints" / "ckpt-0000000002.npz"


def test_eval_log_dir_writes_results_and_says_where(tmp_path, checkpoint, capsys):
    out_dir = tmp_path / "eval"
    argv = ["eval", "--checkpoint", str(checkpoint), "--synthetic", "--precision", "fp32",
            "--log-dir", str(out_dir)]  # fmt: skip
    assert cli.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    record = json.loads((out_dir / "results.json").read_text())
    assert set(record["metrics"]) == {"loss", "top1"}  # 3 classes: no top-5 (1.0 by construction)
    assert lines[-3:-1] == [f"{k}: {record['metrics'][k]:.6g}" for k in ("loss", "top1")]
    assert record["checkpoint"] == str(checkpoint.resolve())
    assert (record["model"], record["recipe"], record["task"], record["precision"]) == (
        "resnet18", "resnet18_cvbench", "classification", "float32")  # fmt: skip
    assert record["files"] == {"plots": []}  # a classifier: no per-class plot
    assert lines[-1] == f"cvbench: wrote {out_dir}/results.json"
    # A second evaluation replaces the results cvbench wrote.
    assert cli.main(argv) == 0


def test_eval_log_dir_refuses_a_link_and_a_foreign_file_before_loading(tmp_path, checkpoint,
                                                                        capsys):  # fmt: skip
    out_dir = tmp_path / "eval"
    out_dir.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("mine")
    (out_dir / "results.json").symlink_to(victim)
    argv = ["eval", "--checkpoint", str(checkpoint), "--synthetic", "--log-dir", str(out_dir)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "Traceback" not in err and victim.read_text() == "mine"
    (out_dir / "results.json").unlink()
    (out_dir / "results.json").write_text("theirs")  # not written by cvbench
    assert cli.main(argv) == 2
    assert "results.json" in capsys.readouterr().err
    assert (out_dir / "results.json").read_text() == "theirs"


def test_a_detectors_ap_per_class_is_plotted(tmp_path):
    args = argparse.Namespace(log_dir=str(tmp_path / "eval"))
    recipe = SimpleNamespace(name="ssd320_v1.2", task="detection")
    task = SimpleNamespace(options=SimpleNamespace(model="ssd320"), recipe=recipe)
    trainer = SimpleNamespace(precision="float32")
    results = {"AP": 0.4, "AP/car": 0.5, "AP/bus": 0.3, "AP/cow": -1.0}
    line = write_eval_results(args, task, trainer, Path("ckpt.npz"), results)
    folder = tmp_path / "eval"
    record = json.loads((folder / "results.json").read_text())
    assert record["files"]["plots"] == ["plots/per_class_ap.png"]
    assert (folder / "plots/per_class_ap.png").read_bytes()[:8] == PNG
    assert line == f"cvbench: wrote {folder}/results.json; plots {folder}/plots/per_class_ap.png"
