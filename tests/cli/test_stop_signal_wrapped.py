"""A stop signal whose exception a library catches and replaces by its own still stops the
command. JAX does that when the signal comes while its jit cache compares two pytrees'
metadata (a Python `__eq__` called from C++): it raises `ValueError: Exception raised while
checking equality of metadata fields of pytree ...` from the handler's exception. `cvbench
train` on JAX stopped by SIGTERM then exited 2 with JAX's line instead of 143 with its stop
line (1 of 5 runs stopped 7 s after start, stop 52)."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from cvbench.cli import StopSignalReceived, stop_on_signals
from cvbench.utils.signals import StopHandlers

pytestmark = pytest.mark.backend_agnostic


def _stop(signum: int) -> None:
    raise InterruptedError(signum)


def test_the_handlers_exception_replaces_the_one_it_caused():
    with pytest.raises(InterruptedError) as caught, StopHandlers(_stop):
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here
        except InterruptedError as e:
            raise ValueError("a library's own error") from e
    assert caught.value.args == (signal.SIGTERM,)


def test_an_error_the_handler_did_not_cause_is_kept():
    # the handler raised, the block caught it; a later, unrelated error ends the block
    with pytest.raises(KeyError, match="unrelated"), StopHandlers(_stop):
        with contextlib.suppress(InterruptedError):
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyError("unrelated")
    # no signal at all: the block's error as it is
    with pytest.raises(ValueError, match="plain"), StopHandlers(_stop):
        raise ValueError("plain")


def test_a_stop_inside_jaxs_pytree_comparison_stops():
    """The real case: the signal comes inside JAX's jit cache lookup (the metadata `__eq__`
    sends it, so the handler runs there every time)."""
    import jax  # the jax extra, installed with the dev set-up
    from jax import tree_util

    class Meta:
        def __hash__(self) -> int:
            return 1

        def __eq__(self, other: object) -> bool:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises inside this call
            return True

    @tree_util.register_pytree_node_class
    class Box:
        def __init__(self, x, meta) -> None:
            self.x, self.meta = x, meta

        def tree_flatten(self):
            return (self.x,), self.meta

        @classmethod
        def tree_unflatten(cls, meta, children):
            return cls(children[0], meta)

    step = jax.jit(lambda box: box.x + 1)
    step(Box(1.0, Meta()))  # compiled; the next call compares the cached pytree's metadata
    with pytest.raises(StopSignalReceived) as caught, stop_on_signals():  # before: ValueError
        step(Box(2.0, Meta()))
    assert caught.value.exit_code == 143
