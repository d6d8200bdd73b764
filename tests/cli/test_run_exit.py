"""`cvbench.cli.run`, the program (console script, `python -m cvbench`): it exits with
`main`'s code; after a stop signal it ends right after the stop line (`os._exit`), without the
interpreter's shutdown, which a compilation still running in a thread of the JAX runtime
crashed (exit 139, a segmentation fault, instead of 143: 4 of 6 runs of `cvbench train` on
JAX stopped 7 s after start, stop 52)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import cvbench.cli as cli


class EndedError(Exception):
    """What the patched `os._exit` raises, with its code (the test process goes on)."""


@pytest.fixture
def ended(monkeypatch):
    flushed = []

    def fake_exit(code: int) -> None:
        raise EndedError(code, list(flushed))

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        monkeypatch.setattr(stream, "flush", lambda name=name: flushed.append(name))
    monkeypatch.setattr(os, "_exit", fake_exit)
    return flushed


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("code", [0, 1, 2, 128])
def test_an_ordinary_code_exits_through_the_interpreter(monkeypatch, ended, code):
    monkeypatch.setattr(cli, "main", lambda argv=None: code)
    with pytest.raises(SystemExit) as caught:
        cli.run(["x"])
    assert caught.value.code == code


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("code", [130, 143])
def test_a_stop_ends_the_process_after_flushing(monkeypatch, ended, code):
    monkeypatch.setattr(cli, "main", lambda argv=None: code)
    with pytest.raises(EndedError) as caught:
        cli.run(["x"])
    assert caught.value.args == (code, ["stdout", "stderr"])  # flushed, then ended


@pytest.mark.slow  # heavy: 4 JAX processes of about 10 s each
def test_a_jax_train_stopped_before_its_first_step_exits_143(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONUNBUFFERED="1")
    codes, lines = [], []
    for attempt in range(4):
        log_dir = tmp_path / f"run{attempt}"
        argv = [sys.executable, "-m", "cvbench", "train", "--model", "resnet18", "--synthetic",
                "--image-size", "32", "--batch-size", "2", "--epochs", "1",
                "--steps-per-epoch", "50", "--no-progress", "--log-every", "0",
                "--log-dir", str(log_dir)]  # fmt: skip
        process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
        time.sleep(7)  # while the train step compiles (before: a crash at exit, 4 of 6)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
        codes.append(process.returncode)
        lines.append([x for x in err.splitlines() if x.startswith("cvbench train:")])
    assert codes == [143] * 4, lines
    assert all(len(x) == 1 and "SIGTERM received: stopped" in x[0] for x in lines), lines
