"""Progress output: the style decision (terminal, Jupyter kernel, log) with a faked
environment, and the plain lines for logs with a fake clock."""

from __future__ import annotations

import io
import sys
import types

import pytest
import tqdm.auto

from cvbench.utils.progress import (
    LineProgress,
    in_jupyter_kernel,
    progress_bar,
    progress_style,
)

pytestmark = pytest.mark.backend_agnostic


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def fake_ipython(monkeypatch, shell_class_name: str | None) -> None:
    """Puts a fake `IPython` module in sys.modules whose `get_ipython()` returns an instance
    of a class named `shell_class_name` (None: no shell, plain Python)."""
    module = types.ModuleType("IPython")
    if shell_class_name is None:
        module.get_ipython = lambda: None
    else:
        shell = type(shell_class_name, (), {})()
        module.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", module)


def test_style_is_notebook_in_a_jupyter_kernel_even_without_a_tty(monkeypatch):
    fake_ipython(monkeypatch, "ZMQInteractiveShell")
    assert in_jupyter_kernel()
    assert progress_style(io.StringIO()) == "notebook"  # isatty() is False in a kernel


def test_a_subclass_of_the_kernel_shell_counts(monkeypatch):
    # Colab's shell subclasses ZMQInteractiveShell.
    module = types.ModuleType("IPython")
    kernel_shell = type("ZMQInteractiveShell", (), {})
    module.get_ipython = lambda: type("Shell", (kernel_shell,), {})()
    monkeypatch.setitem(sys.modules, "IPython", module)
    assert progress_style(io.StringIO()) == "notebook"


@pytest.mark.parametrize("shell", [None, "TerminalInteractiveShell"])
def test_plain_python_and_the_ipython_terminal_follow_the_stream(monkeypatch, shell):
    fake_ipython(monkeypatch, shell)
    assert not in_jupyter_kernel()
    assert progress_style(FakeTTY()) == "terminal"
    assert progress_style(io.StringIO()) == "lines"


def test_without_ipython_loaded_the_stream_decides(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert progress_style(FakeTTY()) == "terminal"
    assert progress_style(io.StringIO()) == "lines"
    closed = io.StringIO()
    closed.close()
    assert progress_style(closed) == "lines"  # isatty() raises ValueError on a closed file


def test_a_terminal_gets_a_tqdm_auto_bar_and_a_log_gets_lines(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    tty = FakeTTY()
    with progress_bar(total=4, desc="train", unit="img", file=tty) as bar:
        assert isinstance(bar, tqdm.auto.tqdm)
        bar.update(4)
    assert "\r" in tty.getvalue()  # the bar redraws itself: right for a terminal only
    log = io.StringIO()
    with progress_bar(total=4, desc="train", unit="img", file=log) as bar:
        assert isinstance(bar, LineProgress)
        bar.update(4)
    assert "\r" not in log.getvalue() and log.getvalue().startswith("train: 4/4 img (100%)")


def test_disabled_prints_nothing_anywhere(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    for stream in (FakeTTY(), io.StringIO()):
        with progress_bar(total=4, file=stream, disable=True) as bar:
            bar.update(4)
        assert stream.getvalue() == ""


def lines(**kwargs):
    """A LineProgress on a StringIO whose clock reads `now[0]`."""
    now = [0.0]
    out = io.StringIO()
    progress = LineProgress(file=out, clock=lambda: now[0], **kwargs)
    return progress, out, now


def test_a_line_every_tenth_of_the_total_and_one_at_the_end():
    p, out, now = lines(total=5000, desc="train", unit="img", every_seconds=1e9)
    for _ in range(50):  # 100 images a second
        now[0] += 1.0
        p.update(100)
    p.close()
    p.close()  # a second close prints nothing
    got = out.getvalue().splitlines()
    # 10%, 20%, ..., 90%: 500, 1,000, ... 4,500 images at 5 s, 10 s ...; 100% is close's.
    assert got[0] == "train: 500/5,000 img (10%), 100 img/s, eta 45s"
    assert got[8] == "train: 4,500/5,000 img (90%), 100 img/s, eta 5s"
    assert got[9] == "train: 5,000/5,000 img (100%), 100 img/s, in 50s"
    assert len(got) == 10


def test_a_line_every_interval_between_the_tenths():
    p, out, now = lines(total=1000, desc="val", unit="img", every_seconds=60.0, initial=0)
    for _ in range(4):  # 1 image every 30 s: 2 lines a minute would be too many
        now[0] += 30.0
        p.update(1)
    # At 60 s and 120 s (2 and 4 images) at 1/30 = 0.0333 img/s.
    assert out.getvalue().splitlines() == [
        "val: 2/1,000 img (0%), 0.0333 img/s, eta 8h19m",  # 998 left x 30 s = 499 min
        "val: 4/1,000 img (0%), 0.0333 img/s, eta 8h18m",  # 996 x 30 s = 498 min
    ]


def test_bytes_are_scaled_and_a_resumed_count_rates_only_the_new_work():
    p, out, now = lines(
        total=4096 * 1024, initial=1024 * 1024, unit="B", unit_scale=True, unit_divisor=1024
    )
    now[0] = 2.0
    p.update(1024 * 1024)  # 2 MiB of 4 MiB: 50%; 1 MiB new in 2 s = 512 KiB/s
    assert out.getvalue() == "2.00M/4.00MB (50%), 512kB/s, eta 4s\n"


def test_unknown_total_postfix_and_write():
    p, out, now = lines(total=None, desc="scan", every_seconds=10.0)
    p.set_postfix(loss="0.5")
    now[0] = 10.0
    p.update(20)
    p.write("a message")
    p.set_description("scan 2")
    p.close()
    assert out.getvalue().splitlines() == [
        "scan: 20 it, 2 it/s, loss=0.5",  # 20 in 10 s
        "a message",
        "scan 2: 20 it, 2 it/s, in 10s, loss=0.5",
    ]


@pytest.mark.parametrize(
    "bad", [{"every_seconds": 0}, {"every_fraction": 0}, {"every_fraction": 2}]
)
def test_bad_intervals_are_errors_naming_the_value(bad):
    name, value = next(iter(bad.items()))
    with pytest.raises(ValueError, match=f"{name} must be .*, got {value}"):
        LineProgress(total=1, **bad)


def test_docstring_examples():
    import doctest

    import cvbench.utils.progress as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
