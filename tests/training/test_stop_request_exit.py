"""A SIGTERM that lands while `StopRequest` puts the previous handlers back is not lost
(review V F2: the request was read before the handlers were put back, so a signal in
between was recorded and never acted on: the command exited 0)."""

from __future__ import annotations

import os
import signal

import pytest

from cvbench.training.signals import StopRequest


@pytest.mark.backend_agnostic
def test_a_signal_while_the_handlers_are_put_back_reaches_the_previous_handler(monkeypatch):
    got = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    real, armed, sent = signal.signal, [], []

    def putting_back(signum, handler):
        if armed and not sent:  # the first handler put back: the signal lands just before
            sent.append(signum)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(signum, handler)

    try:
        with StopRequest() as request:
            monkeypatch.setattr(signal, "signal", putting_back)
            armed.append(True)
        monkeypatch.setattr(signal, "signal", real)
        assert sent and got == [signal.SIGTERM] and request.signum is None
    finally:
        signal.signal(signal.SIGTERM, previous)
