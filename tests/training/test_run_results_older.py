"""An older cvbench's training wrote its `results.json` without recording it: a resume of
such a run goes on (its results file holds the run's plan, beside its `train_log.jsonl`),
where a results file that is nobody's training's is still refused (FC's check, 653e291)."""

from __future__ import annotations

import json

import pytest

from cvbench.training.run_dir import check_results_file, foreign_results


def _folder(tmp_path, *, record: dict, log: bool):
    (tmp_path / "results.json").write_text(json.dumps(record))
    if log:
        (tmp_path / "train_log.jsonl").write_text('{"event": "start"}\n')
    return tmp_path


def test_an_older_trainings_unrecorded_results_are_the_runs(tmp_path):
    folder = _folder(tmp_path, record={"plan": {"epochs": 1}, "metrics": {}}, log=True)
    assert foreign_results(folder) is None
    check_results_file(folder)  # no refusal: the resume goes on


@pytest.mark.parametrize(
    "record, log",
    [({"plan": {"epochs": 1}}, False), ({"top1": 0.5}, True), ({"top1": 0.5}, False)],
    ids=["plan_without_a_run_log", "no_plan_beside_a_run_log", "neither"],
)
def test_an_unrecorded_results_file_that_is_no_trainings_is_refused(tmp_path, record, log):
    folder = _folder(tmp_path, record=record, log=log)
    assert foreign_results(folder) == "it was not written by cvbench"
    with pytest.raises(ValueError, match="is not a training's results file"):
        check_results_file(folder)
