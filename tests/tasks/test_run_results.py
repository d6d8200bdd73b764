"""A run's results on disk (#39 item 5/6): `results.json` (final metrics, plan, precision,
the files written), the final metrics in `train_log.jsonl` and TensorBoard, the PNG plots
(loss, learning rate, accuracy or AP per epoch; per-class AP for a detector) and the last
line saying what was written where; all inside the run folder, never through a link."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from cvbench.cli.train import write_run_results
from cvbench.demo import plots
from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.tasks.recipes.plan import reference_learning_rate
from cvbench.tasks.runner import RESULTS_NAME, epoch_history, written_line
from cvbench.training import TrainConfig
from cvbench.training.run_log import read_run_log
from cvbench.utils.errors import BadFileError

PNG = b"\x89PNG\r\n\x1a\n"


def _run(log_dir, *, batch, epochs=2, steps=2):
    options = TaskOptions(model="resnet18", image_size=32, num_classes=3, synthetic_steps=steps,
                          settings={"epochs": epochs}, reasons={"epochs": "--epochs"})  # fmt: skip
    config = TrainConfig(log_dir=log_dir, log_every=0, progress_bar=False, export=False, seed=1)
    return prepare_run(ClassificationTask(options), batch_size=batch, precision="fp32",
                       config=config, distribution="single", seed=1)  # fmt: skip


def _tensorboard(folder):
    import tensorflow as tf

    found = {}
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for v in event.summary.value:
                value = float(tf.make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
                found[v.tag] = (event.step, value)
    return found


@pytest.mark.parametrize("batch, evaluate", [(4, "epoch"), (2, "end")])
def test_a_run_folder_ends_with_its_results(tmp_path, capsys, batch, evaluate):
    run = _run(tmp_path / "run", batch=batch)
    results = run.fit(evaluate=evaluate)
    line = write_run_results(run, results)
    folder = tmp_path / "run"

    record = json.loads((folder / RESULTS_NAME).read_text())
    assert record["metrics"] == pytest.approx(results)
    assert set(results) == {"loss", "top1"}  # 3 classes: no top-5
    assert record["plan"] == dataclasses.asdict(run.plan)
    assert (record["epochs"], record["steps"]) == (2, 4)  # 2 epochs of 2 steps
    assert (record["precision"], record["model"], record["recipe"]) == (
        "float32", "resnet18", "resnet18_cvbench")  # fmt: skip
    files = record["files"]
    assert files["checkpoint"] == "checkpoints/ckpt-0000000004.npz"  # the newest: step 4
    assert files["plots"] == ["plots/training.png"] and files["log"] == "train_log.jsonl"
    assert "model" not in files  # export=False: no model written, none claimed
    for name in (files["checkpoint"], *files["plots"], files["log"]):
        assert (folder / name).is_file(), name
    assert (folder / "plots/training.png").read_bytes()[:8] == PNG

    # The final metrics: the run log's last event and TensorBoard's results/ scalars at step 4.
    last = read_run_log(folder / "train_log.jsonl")[-1]
    assert last["event"] == "results" and last["metrics"] == record["metrics"]
    board = _tensorboard(folder / "tensorboard")
    for name, value in results.items():
        step, logged = board[f"results/{name}"]
        assert step == 4 and logged == pytest.approx(value, rel=1e-6)

    # The last line says what was written where.
    assert line == (
        f"cvbench: wrote {folder}/results.json; plots {folder}/plots/training.png; checkpoint "
        f"{folder}/checkpoints/ckpt-0000000004.npz; log {folder}/train_log.jsonl; TensorBoard "
        f"{folder}/tensorboard"
    )


@pytest.mark.backend_agnostic
def test_the_learning_rate_per_epoch_is_the_schedules(tmp_path):
    # 3 epochs x 2 steps; resnet18_cvbench's 8-epoch warmup (16 steps) capped at 6 // 2 = 3.
    run = _run(tmp_path / "run", batch=4, epochs=3)
    run.fit(evaluate="none")
    history = run.epoch_history()
    assert history["epoch"] == [1, 2, 3] and history["step"] == [2, 4, 6]
    # The rate of each epoch's last step (index step - 1), by the reference's own formula:
    # warmup 0.004 x 1 / 3 at index 1, then DLE's cosine from step 0 at indices 3 and 5.
    expected = [reference_learning_rate(run.task.recipe, s - 1, run.plan) for s in (2, 4, 6)]
    assert expected[0] == pytest.approx(0.004 / 3)
    assert history["learning_rate"] == pytest.approx(expected, rel=1e-5)
    events = [e for e in read_run_log(tmp_path / "run/train_log.jsonl") if e["event"] == "epoch"]
    assert history["loss"] == [e["loss"] for e in events]


def test_without_a_log_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = _run(None, batch=4, epochs=1)
    run.fit(evaluate="none")
    assert run.write_results({"top1": 0.5}) == {} and run.epoch_history() == {}
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("entry", ["results.json", "plots"])
def test_a_planted_link_is_refused_and_its_target_untouched(tmp_path, entry):
    run = _run(tmp_path / "run", batch=4, epochs=1)
    results = run.fit(evaluate="end")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    target = victim / "keep.txt" if entry == "results.json" else victim
    (tmp_path / "run" / entry).symlink_to(target)
    with pytest.raises(BadFileError, match="symbolic link"):
        write_run_results(run, results)
    assert os.listdir(victim) == ["keep.txt"] and (victim / "keep.txt").read_text() == "mine"
    if entry == "plots":  # refused before anything else was written
        assert not (tmp_path / "run" / RESULTS_NAME).exists()


@pytest.mark.backend_agnostic
def test_plot_run_draws_per_class_ap_of_a_detector(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(plots, "plot_bars", lambda values, path, **kw: drawn.update(values))
    history = {"epoch": [1, 2], "step": [5, 10], "loss": [3.0, 2.0],
               "learning_rate": [0.01, 0.02], "val_AP": [0.1, 0.2]}  # fmt: skip
    metrics = {"AP": 0.2, "AP50": 0.4, "AP/cat": 0.3, "AP/dog": 0.5, "AP/bird": -1.0}
    written = plots.plot_run(history, metrics, tmp_path)
    assert written == [str(tmp_path / "training.png"), str(tmp_path / "per_class_ap.png")]
    # Highest first; the class without ground truth (COCO's -1) left out.
    assert list(drawn.items()) == [("dog", 0.5), ("cat", 0.3)]


@pytest.mark.backend_agnostic
def test_plot_run_puts_the_final_evaluation_at_the_last_epoch(tmp_path, monkeypatch):
    seen = {}

    def capture(panels, path, **kwargs):
        seen.update(panels=panels, **kwargs)

    monkeypatch.setattr(plots, "plot_curves", capture)
    history = {"epoch": [1, 2, 3], "step": [2, 4, 6], "loss": [2.0, 1.5, 1.0],
               "learning_rate": [0.1, 0.2, 0.1], "top1": [0.2, 0.4, 0.6]}  # fmt: skip
    plots.plot_run(history, {"loss": 1.2, "top1": 0.5, "top5": 0.9}, tmp_path)
    panels = seen["panels"]
    assert list(panels) == ["loss", "learning rate", "accuracy"]  # no AP panel: a classifier
    assert panels["loss"]["final evaluation"] == ([3], [1.2])
    assert panels["accuracy"]["final evaluation top-1"] == ([3], [0.5])
    assert panels["accuracy"]["training top-1"] == ([1, 2, 3], [0.2, 0.4, 0.6])
    assert seen["ylabels"]["learning rate"] == "learning rate" and seen["xlabel"] == "epoch"


def test_plot_run_draws_real_pngs(tmp_path):
    history = {"epoch": [1, 2], "step": [2, 4], "loss": [2.0, math.nan], "val_AP": [0.1, 0.2]}
    written = plots.plot_run(history, {"AP": 0.2, "AP/cat": 0.25}, tmp_path)
    assert [Path(p).read_bytes()[:8] for p in written] == [PNG, PNG]


@pytest.mark.backend_agnostic
def test_written_line_lists_each_kind_once():
    record = {"files": {"log": "train_log.jsonl", "plots": ["plots/a.png", "plots/b.png"]}}
    assert written_line("r/", record) == (
        "cvbench: wrote r/results.json; plots r/plots/a.png, r/plots/b.png; log r/train_log.jsonl"
    )


@pytest.mark.backend_agnostic
def test_epoch_history_of_no_epochs_is_empty():
    assert epoch_history([{"event": "start"}]) == {}
    assert np.isnan(epoch_history([{"event": "epoch", "epoch": 1, "step": 1, "x": "nan"}])["x"][0])


class _Detector:
    """A task stand-in recording whether each evaluation asked for AP per class."""

    def __init__(self):
        self.per_category, self.asked = False, []
        self.recipe = SimpleNamespace(name="r", knobs=lambda: (), deviations=())

    def evaluate(self, trainer, *, batch_size):
        self.asked.append(self.per_category)
        return {"AP": 0.5, **({"AP/car": 0.5} if self.per_category else {})}


class _Trainer:
    """Runs `epochs` epoch ends, each calling the validation function as `Trainer.fit` does."""

    def __init__(self):
        self.state = {"epoch": 0}

    def fit(self, data, *, epochs, validation_data=None, **kwargs):
        history = SimpleNamespace(history={})
        for _ in range(epochs):
            self.state["epoch"] += 1
            for k, v in (validation_data() if validation_data else {}).items():
                history.history.setdefault(f"val_{k}", []).append(v)
        return history


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    "evaluate, eval_count, asked",
    [
        ("end", None, [True]),  # the one evaluation after training
        ("epoch", None, [False, False, True]),  # only the last epoch's
        ("end", 2, [False, True]),  # eval_count 2 of 3: after epochs 2 and 3, the last
    ],
)
def test_only_the_final_evaluation_reports_ap_per_class(monkeypatch, evaluate, eval_count, asked):
    from cvbench.tasks import runner

    monkeypatch.setattr(runner, "recipe_record", lambda *a, **k: {})
    task = _Detector()
    run = runner.TaskRun(task=task, trainer=_Trainer(), train=SimpleNamespace(data=None,
                         steps_per_epoch=1), batch_size=1, plan=None, notes=None,
                         final_per_class=True)  # fmt: skip
    results = run.fit(epochs=3, steps_per_epoch=1, evaluate=evaluate, eval_count=eval_count)
    assert task.asked == asked and task.per_category is False  # set back after
    assert results == {"AP": 0.5, "AP/car": 0.5}
    # Without final_per_class (the library's default): never.
    task.asked, run.final_per_class, run.trainer = [], False, _Trainer()
    assert "AP/car" not in run.fit(epochs=3, steps_per_epoch=1, evaluate=evaluate,
                                   eval_count=eval_count)  # fmt: skip
    assert task.asked == [False] * len(asked)
