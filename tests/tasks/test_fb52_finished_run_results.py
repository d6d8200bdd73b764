"""P52 F6: a finished run fitted again (resumed with no epoch left: a rerun, a scheduler's
retry, a kill between the last checkpoint and `results.json`) with per-epoch evaluation
returned {} and `write_results` replaced `results.json`'s metrics with {}. Now the finished
model is evaluated once (its result), and no empty metrics ever replace the same step's."""

from __future__ import annotations

import json

import pytest

import cvbench.cli as cli
from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.tasks.runner import RESULTS_NAME
from cvbench.training import TrainConfig


def _run(log_dir):
    options = TaskOptions(model="resnet18", image_size=32, num_classes=3, synthetic_steps=1,
                          settings={"epochs": 1})  # fmt: skip
    config = TrainConfig(log_dir=str(log_dir), log_every=0, progress_bar=False, export=False,
                         seed=1, resume=True)  # fmt: skip
    return prepare_run(ClassificationTask(options), batch_size=2, precision="fp32",
                       config=config, distribution="single", seed=1)  # fmt: skip


def _metrics(log_dir):
    return json.loads((log_dir / RESULTS_NAME).read_text())["metrics"]


@pytest.mark.parametrize("fit_args", [{"evaluate": "epoch"}, {"eval_count": 1}])
def test_a_finished_run_fitted_again_keeps_its_result(tmp_path, fit_args):
    first = _run(tmp_path)
    results = first.fit(**fit_args)
    first.write_results(results)
    assert set(results) == {"loss", "top1"}
    again = _run(tmp_path)  # resumes at its last step: no epoch left
    rerun = again.fit(**fit_args)
    assert again.trainer.state["step"] == 1
    assert rerun == pytest.approx(results)  # was {}
    again.write_results(rerun)
    assert _metrics(tmp_path) == pytest.approx(results)  # was {}


def test_no_results_never_replace_the_same_steps_metrics(tmp_path):
    first = _run(tmp_path)
    results = first.fit(evaluate="end")
    first.write_results(results)
    again = _run(tmp_path)
    assert again.fit(evaluate="none") is None
    record = again.write_results(None)
    assert record["metrics"] == pytest.approx(results)  # was {}
    assert _metrics(tmp_path) == pytest.approx(results)


def test_the_command_resuming_a_finished_run_keeps_its_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))
    run = tmp_path / "run"
    argv = ["train", "--model", "resnet18", "--synthetic", "--batch-size", "2", "--image-size",
            "32", "--num-classes", "3", "--precision", "fp32", "--epochs", "1",
            "--steps-per-epoch", "1", "--eval", "epoch", "--log-dir", str(run), "--log-every",
            "0", "--no-progress", "--no-export", "--seed", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    first = _metrics(run)
    assert set(first) == {"loss", "top1"}
    assert cli.main([*argv, "--resume"]) == 0
    assert "resumed from" in capsys.readouterr().out
    assert _metrics(run) == pytest.approx(first)  # was {}
