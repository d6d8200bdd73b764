"""A run folder's `results.json` is the training's: recorded (`files.recording`), never
replaced when another command wrote it, and the run lock held to the end (`RunDirectory`
counts nested holds; `run_holder` reads it without taking it)."""

import json
import os

import pytest

from cvbench.training.run_dir import (
    RunDirectory,
    RunFolder,
    foreign_results,
    run_holder,
    training_results,
)
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import record_output, written_by_cvbench


def _results(folder, record, *, recorded=True):
    folder.mkdir(exist_ok=True)
    path = RunFolder(folder).results
    path.write_text(json.dumps(record))
    if recorded:
        record_output(path)
    return path


def test_whose_results_json_it_is(tmp_path):
    assert foreign_results(tmp_path / "none") is None
    train = _results(tmp_path / "t", {"plan": {}, "metrics": {}})
    assert training_results(train) and foreign_results(tmp_path / "t") is None
    evaluated = _results(tmp_path / "e", {"metrics": {}, "checkpoint": "c.npz"})
    assert not training_results(evaluated)
    assert foreign_results(tmp_path / "e") == "another command's results, written by cvbench"
    _results(tmp_path / "u", {"plan": {}}, recorded=False)
    assert foreign_results(tmp_path / "u") == "it was not written by cvbench"


def test_a_run_refuses_a_folder_whose_results_json_is_another_commands(tmp_path):
    _results(tmp_path, {"metrics": {}, "checkpoint": "c.npz"})
    with pytest.raises(ValueError) as refused:
        RunDirectory(tmp_path).acquire(fresh=True)
    assert str(refused.value) == (
        f"{tmp_path}/results.json is not a training's results file (another command's "
        "results, written by cvbench): the run would replace it at its end; move it, or train "
        "in another log directory"
    )
    assert not RunFolder(tmp_path).lock.exists()
    _results(tmp_path, {"plan": {}})  # a training's: a resume goes on
    run = RunDirectory(tmp_path)
    run.acquire(fresh=False)
    run.release()


def test_nested_holds_keep_the_lock_until_the_last_release(tmp_path):
    assert run_holder(tmp_path) is None
    run = RunDirectory(tmp_path)
    run.acquire(fresh=True)
    run.acquire(fresh=False)  # the Trainer's fit inside the command's hold
    assert run_holder(tmp_path).startswith(f"pid {os.getpid()} on host ")
    run.release()
    assert run.held and run_holder(tmp_path) is not None
    run.release()
    assert not run.held and run_holder(tmp_path) is None


def _tiny_run(log_dir):
    from cvbench.tasks import TaskOptions, make_task, prepare_run
    from cvbench.training import TrainConfig

    task = make_task(TaskOptions(model="resnet18", image_size=32, num_classes=4, synthetic_steps=1))
    config = TrainConfig(log_dir=str(log_dir), log_every=0, progress_bar=False, export=False)
    return prepare_run(task, batch_size=2, precision="fp32", config=config)


def test_the_run_holds_its_folder_to_results_json_records_it_and_never_replaces_another(
    tmp_path,
):
    run = _tiny_run(tmp_path / "run")
    folder = RunFolder(tmp_path / "run")
    with run.holding_log_dir():
        results = run.fit(epochs=1, evaluate="none")
        assert run_holder(folder.root) is not None  # after fit: still held
        record = run.write_results(results)
    assert run_holder(folder.root) is None
    assert written_by_cvbench(folder.results) and training_results(folder.results)
    assert json.loads(folder.results.read_text()) == record
    # another command's results.json appears before the end: kept, and said so
    other = b'{"checkpoint": "c.npz", "metrics": {"top1": 0.5}}'
    folder.results.write_bytes(other)
    record_output(folder.results)
    with pytest.raises(BadFileError) as refused:
        run.write_results(results)
    assert str(refused.value) == (
        f"{folder.results} appeared while the run trained (another command's results, "
        f"written by cvbench) and was not replaced; the results are in {folder.log} (its "
        "results event)"
    )
    assert folder.results.read_bytes() == other
