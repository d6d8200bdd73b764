"""A stop signal whose handler runs inside a garbage-collection callback still stops the
command. JAX registers such a callback (`gc.callbacks`, run at every collection); Python
prints what a handler raises there (`Exception ignored in: <function ...>`) and drops it: the
command went on and exited 0, and its later SIGTERMs were taken for a second one (ignored).
Here the signal is sent from inside a callback of our own, which puts the handler there
every time (`os.kill` runs it at once), on either backend."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import time
from collections.abc import Iterator

import pytest

import cvbench.cli as cli
from cvbench.cli import StopSignalReceived, stop_on_signals
from cvbench.cli import train as train_cli
from cvbench.training.signals import StopRequest
from cvbench.utils.signals import StopHandlers

pytestmark = pytest.mark.backend_agnostic

TINY = ["--model", "resnet18", "--batch-size", "2", "--image-size", "32", "--num-classes", "4"]
KEPT = "nothing was saved (no --log-dir)"


def send_while_collecting(signum: int) -> None:
    """Sends `signum` to this process from inside a gc callback (the handler runs there)."""
    sent = []

    def callback(phase: str, info: dict) -> None:
        if not sent:
            sent.append(phase)
            os.kill(os.getpid(), signum)

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)
    assert sent == ["start"]


@pytest.fixture
def command(monkeypatch) -> Iterator[list]:
    """`cvbench train` runs the function appended to the list instead of training."""
    body = []
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))
    monkeypatch.setattr(train_cli, "train_command", lambda args: body[0]())
    return body


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_python_drops_in_a_gc_callback_stops_the_command_at_once(
    command, capsys, signum
):
    went_on = []

    def work():
        send_while_collecting(signum)  # the handler raises there: Python drops it
        time.sleep(30)  # the old handler had stopped nothing: it slept, then exited 0
        went_on.append(1)
        return 0

    command.append(work)
    started = time.monotonic()
    assert cli.main(["train", *TINY, "--synthetic"]) == 128 + signum
    assert time.monotonic() - started < 10  # raised again at once, not after the sleep
    assert not went_on
    name = signal.Signals(signum).name
    assert capsys.readouterr().err == f"cvbench train: {name} received: stopped; {KEPT}\n"


def test_a_stop_dropped_as_the_command_returns_is_its_exit_code(command, capsys):
    command.append(lambda: send_while_collecting(signal.SIGTERM) or 0)
    assert cli.main(["train", *TINY, "--synthetic"]) == 143  # was 0
    assert capsys.readouterr().err == f"cvbench train: SIGTERM received: stopped; {KEPT}\n"


def test_a_second_sigint_python_drops_while_the_command_cleans_up_still_interrupts(command, capsys):
    cleaned = []

    def work():
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # stops: the cleanup runs
        finally:
            send_while_collecting(signal.SIGINT)  # a second Ctrl-C, dropped by Python
            time.sleep(30)  # the old handler's cleanup went on to the end: exit 143
            cleaned.append(1)

    command.append(work)
    assert cli.main(["train", *TINY, "--synthetic"]) == 130
    assert not cleaned
    assert capsys.readouterr().err == "cvbench: interrupted\n"


def test_a_second_sigterm_while_the_command_cleans_up_is_still_ignored(command, capsys):
    cleaned = []

    def work():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            send_while_collecting(signal.SIGTERM)  # e.g. sent by the launcher too
            cleaned.append(1)

    command.append(work)
    assert cli.main(["train", *TINY, "--synthetic"]) == 143
    assert cleaned == [1]
    assert capsys.readouterr().err == f"cvbench train: SIGTERM received: stopped; {KEPT}\n"


def test_a_stop_caught_and_not_raised_again_is_raised_as_the_block_ends():
    caught = contextlib.suppress(StopSignalReceived)  # e.g. a library's `except:` that goes on
    with pytest.raises(StopSignalReceived) as e, stop_on_signals(), caught:
        os.kill(os.getpid(), signal.SIGTERM)
    assert e.value.exit_code == 143


def test_a_second_sigint_python_drops_during_training_still_interrupts():
    with pytest.raises(KeyboardInterrupt), StopRequest() as request:
        os.kill(os.getpid(), signal.SIGINT)  # the first: recorded, the step goes on
        assert request.signum == signal.SIGINT
        send_while_collecting(signal.SIGINT)  # the second: stop now, dropped by Python
        time.sleep(30)


def test_a_signal_training_had_no_step_left_to_stop_at_is_passed_on():
    # fit's loop ended after the signal came (no stop point saw it): the command's handler
    # gets it, as for a signal in any phase after training; it was dropped with the request
    with pytest.raises(StopSignalReceived) as e, stop_on_signals(), StopRequest():
        os.kill(os.getpid(), signal.SIGTERM)
    assert e.value.signum == signal.SIGTERM


def test_other_exceptions_python_drops_reach_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr("sys.unraisablehook", lambda unraisable: seen.append(unraisable))

    def failing(phase, info):
        raise ValueError(phase)

    with StopHandlers(lambda signum: None):
        gc.callbacks.append(failing)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(failing)
    assert [str(u.exc_value) for u in seen] == ["start", "stop"]
    assert [u.object for u in seen] == [failing, failing]


def test_the_handlers_and_the_hook_are_put_back():
    hook = sys.unraisablehook
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with pytest.raises(StopSignalReceived), stop_on_signals():
        send_while_collecting(signal.SIGTERM)
    assert {s: signal.getsignal(s) for s in before} == before
    assert sys.unraisablehook is hook
