"""`report_corrupt`: the count of the corrupt records `--skip-corrupt` skipped, printed by rank
0 and recorded through the run log (`cvbench.training.run_log.RunLog`)."""

from __future__ import annotations

import argparse
import json

import numpy as np

from cvbench.cli.task_args import report_corrupt
from cvbench.training.run_log import read_run_log


class FakeTask:
    def __init__(self, count: int) -> None:
        self.count = count

    def corrupt_records(self) -> int:
        return self.count


class FakeDistribution:
    """`ranks` ranks, each skipping as many records as this one."""

    def __init__(self, *, ranks: int = 1, is_chief: bool = True) -> None:
        self.ranks, self.is_chief = ranks, is_chief

    def sum_arrays(self, arrays):
        return [np.asarray(a) * self.ranks for a in arrays]


def skip(flag: bool = True) -> argparse.Namespace:
    return argparse.Namespace(skip_corrupt=flag)


def test_the_event_goes_through_the_run_log(tmp_path, capsys):
    log = tmp_path / "train_log.jsonl"
    log.write_bytes(b'{"event": "start", "time": 1.0}\n{"event": "step", "lo')  # killed mid-line
    total = report_corrupt(skip(), FakeTask(3), FakeDistribution(ranks=2), log_dir=str(tmp_path))
    assert total == 6
    assert capsys.readouterr().out == "cvbench: skipped 6 corrupt records (--skip-corrupt)\n"
    lines = log.read_text().splitlines()
    events = [json.loads(line) for line in lines]  # RunLog dropped the partial line: all parse
    assert [e["event"] for e in events] == ["start", "partial_line_dropped", "corrupt_records"]
    assert sorted(events[-1]) == ["count", "event", "time"] and events[-1]["count"] == 6
    assert lines[-1].startswith('{"count": 6, "event": "corrupt_records", "time": ')
    assert read_run_log(log)[-1] == events[-1]
    assert [p.name for p in tmp_path.iterdir()] == ["train_log.jsonl"]  # no TensorBoard file


def test_one_record_and_no_log_folder(tmp_path, capsys):
    missing = tmp_path / "absent"
    assert report_corrupt(skip(), FakeTask(1), FakeDistribution(), log_dir=str(missing)) == 1
    assert capsys.readouterr().out == "cvbench: skipped 1 corrupt record (--skip-corrupt)\n"
    assert not missing.exists()  # the run log is not created where the run wrote none
    assert report_corrupt(skip(), None, FakeDistribution()) == 0


def test_other_ranks_and_runs_without_the_flag_say_nothing(tmp_path, capsys):
    other = FakeDistribution(ranks=4, is_chief=False)
    assert report_corrupt(skip(), FakeTask(2), other, log_dir=str(tmp_path)) == 8
    assert (
        report_corrupt(skip(False), FakeTask(2), FakeDistribution(), log_dir=str(tmp_path)) is None
    )
    assert capsys.readouterr().out == "" and list(tmp_path.iterdir()) == []
