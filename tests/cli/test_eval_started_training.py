"""A training started in eval's `--log-dir` while eval ran (review V49 #3: eval checked the
folder only at its start, wrote its results.json into the training's held folder, and the
training then ended refusing it): eval checks again before writing, and refuses naming why,
with its results printed above (nothing lost)."""

from __future__ import annotations

import inspect

import pytest

from cvbench.cli import evaluate
from cvbench.cli.errors import CLIError
from cvbench.training.run_dir import RunDirectory, RunDirInUseError

AFTER = " (a training started in it while eval ran); the results were printed above"


def test_a_run_log_that_appeared_is_refused_after_the_evaluation(tmp_path):
    folder = tmp_path / "ev"
    folder.mkdir()
    evaluate.refuse_training_folder(str(folder), evaluated=True)  # still free: no refusal
    (folder / "train_log.jsonl").write_text("{}\n")  # a training started meanwhile
    with pytest.raises(CLIError) as caught:
        evaluate.refuse_training_folder(str(folder), evaluated=True)
    assert str(caught.value) == (
        f"{folder} is a training run's folder (it holds train_log.jsonl): give eval another "
        f"--log-dir{AFTER}"
    )


def test_a_training_holding_the_folder_is_refused_after_the_evaluation(tmp_path):
    held = RunDirectory(tmp_path / "ev")
    held.acquire(fresh=True)
    try:
        with pytest.raises(RunDirInUseError) as caught:
            evaluate.refuse_training_folder(str(tmp_path / "ev"), evaluated=True)
    finally:
        held.release()
    assert str(caught.value).startswith(f"{tmp_path / 'ev'} is in use by a training run (pid ")
    assert str(caught.value).endswith(AFTER)


def test_eval_checks_again_right_before_writing_its_folder():
    # the command's order: the second check comes after the evaluation and before any
    # results are written (outside `results_printed_above`, which rebuilds OSErrors)
    source = inspect.getsource(evaluate.eval_command)
    check = source.index("refuse_training_folder(args.log_dir, evaluated=True)")
    assert source.index("task.evaluate(") < check < source.index("results_printed_above()")
