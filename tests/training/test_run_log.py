"""RunLog's progress bar: on a terminal and in a Jupyter kernel (tqdm.auto), not in logs."""

from __future__ import annotations

import io
import sys
import types

import pytest
import tqdm.auto

from cvbench.training.run_log import RunLog, wants_bar

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
