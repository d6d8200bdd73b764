"""RunLog's progress bar (on a terminal and in a Jupyter kernel, tqdm.auto, not in logs) and
its JSON-lines log (a partial last line dropped, a full disk named)."""

from __future__ import annotations

import errno
import io
import json
import sys
import types

import pytest
import tqdm.auto

from cvbench.training.run_log import RunLog, drop_partial_line, read_run_log, wants_bar
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def jupyter_kernel(monkeypatch):
    """A faked Jupyter kernel: `IPython.get_ipython()` returns a ZMQInteractiveShell."""
    module = types.ModuleType("IPython")
    shell = type("ZMQInteractiveShell", (), {})()
    module.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", module)


@pytest.fixture
def no_ipython(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)


def test_auto_shows_the_bar_in_a_jupyter_kernel(jupyter_kernel, monkeypatch):
    # Regression: the decision was `sys.stderr.isatty()`, False in a kernel: no bar.
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert wants_bar("auto")
    log = RunLog(None, enabled=True, progress_bar="auto")
    log.start_bar(total=3, initial=0, description="epoch 1")
    assert isinstance(log._bar, tqdm.auto.tqdm)
    log.close()


def test_auto_follows_the_terminal_outside_a_kernel(no_ipython, monkeypatch):
    assert wants_bar("auto", FakeTTY()) and not wants_bar("auto", io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a log file: the step lines suffice
    log = RunLog(None, enabled=True, progress_bar="auto")
    log.start_bar(total=3, initial=0, description="epoch 1")
    assert log._bar is None
    monkeypatch.setattr(sys, "stderr", FakeTTY())
    assert RunLog(None, enabled=True, progress_bar="auto")._want_bar


def test_explicit_settings_win_and_other_ranks_show_none(jupyter_kernel):
    assert wants_bar(True, io.StringIO()) and not wants_bar(False, FakeTTY())
    assert not RunLog(None, enabled=False, progress_bar=True)._want_bar
    with pytest.raises(ValueError, match="got 'yes'"):
        wants_bar("yes")


# ----------------------------------------------------------------------- the JSON-lines log
def test_a_partial_last_line_is_dropped_and_recorded_when_the_log_is_reopened(tmp_path):
    path = tmp_path / "train_log.jsonl"
    path.write_bytes(b'{"event": "start", "time": 1.0}\n{"event": "step", "lo')  # killed mid-line
    log = RunLog(tmp_path, enabled=True, progress_bar=False)
    log.record("start", step=3)
    log.close()
    events = [json.loads(line) for line in path.read_text().splitlines()]  # every line parses
    assert [e["event"] for e in events] == ["start", "partial_line_dropped", "start"]
    assert events[1]["bytes"] == 21 and events[1]["text"] == '{"event": "step", "lo'
    assert path.read_bytes().startswith(b'{"event": "start", "time": 1.0}\n{"bytes": 21, ')


@pytest.mark.parametrize("content", [b"", b'{"event": "start"}\n'])
def test_a_complete_log_is_appended_to_as_it_is(tmp_path, content):
    path = tmp_path / "train_log.jsonl"
    path.write_bytes(content)
    log = RunLog(tmp_path, enabled=True, progress_bar=False)
    log.record("epoch", epoch=1)
    log.close()
    assert path.read_bytes().startswith(content)
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()][-1] == "epoch"
    assert "partial_line_dropped" not in path.read_text()


def test_drop_partial_line_finds_the_newline_across_chunks(tmp_path, monkeypatch):
    from cvbench.training import run_log

    monkeypatch.setattr(run_log, "_CHUNK", 4)
    path = tmp_path / "log"
    path.write_bytes(b"a\n" + b"b" * 10)
    assert drop_partial_line(path, keep_text=3) == (10, b"bbb")
    assert path.read_bytes() == b"a\n"
    path.write_bytes(b"no newline at all")
    assert drop_partial_line(path) == (17, b"no newline at all") and path.read_bytes() == b""
    assert drop_partial_line(tmp_path / "absent") == (0, b"")


def test_read_run_log_leaves_out_a_partial_last_line_and_names_a_bad_one(tmp_path):
    path = tmp_path / "train_log.jsonl"
    path.write_text('{"event": "start"}\n\n{"event": "step", "lo')
    assert read_run_log(path) == [{"event": "start"}]
    path.write_text('{"event": "start"}\nnot json\n')
    with pytest.raises(BadFileError, match=rf"^{path}: line 2 is not JSON \("):
        read_run_log(path)


def test_a_full_disk_writing_the_log_names_the_file(tmp_path):
    log = RunLog(tmp_path, enabled=True, progress_bar=False)
    # Every write: ENOSPC. (A link train_log.jsonl -> /dev/full is refused: never followed.)
    log._jsonl.close()
    log._jsonl = open("/dev/full", "ab", buffering=0)  # noqa: SIM115
    with pytest.raises(OSError) as e:
        log.record("start")
    log.close()  # nothing buffered is left to fail again
    assert e.value.errno == errno.ENOSPC
    assert e.value.filename == str(tmp_path / "train_log.jsonl")
    assert str(e.value) == f"[Errno 28] No space left on device: '{tmp_path}/train_log.jsonl'"


def test_an_events_only_log_opens_no_tensorboard_writer(tmp_path):
    log = RunLog(tmp_path, enabled=True, progress_bar=False, tensorboard=False)
    log.record("corrupt_records", count=2)
    log.scalars(1, {"loss": 1.0})  # nothing to write to: no error
    log.close()
    assert [p.name for p in tmp_path.iterdir()] == ["train_log.jsonl"]
    assert read_run_log(tmp_path / "train_log.jsonl")[0]["count"] == 2
