"""Handlers of the stop signals (SIGTERM, SIGINT) whose exceptions are never lost.

Python runs a signal handler in the main thread between two bytecodes of whatever Python
code runs then. That can be a function Python calls from C and whose exceptions it only
prints (`Exception ignored in: <function ...>`) and drops: a garbage-collection callback
(JAX registers one, `gc.callbacks`, run at every collection), a `__del__` method, a weakref
callback. A handler that raises there (cvbench's "stop now") asked for nothing: the command
went on and exited 0, and its later signals were taken for a second one. `StopHandlers`,
which every cvbench stop handler is installed with (`cvbench.cli.stop_on_signals`,
`cvbench.training.signals.StopRequest`), makes sure what the handler raises reaches the
program:

- an exception of the handler that Python drops is raised again soon after, outside that
  function: the block's `sys.unraisablehook` knows it (and prints nothing for it) and a
  thread sends the signal to the main thread again (once more each time it comes where it
  cannot be raised), whose handler then raises the same exception instead of calling
  `handle` (a handler never takes its own signal, sent again, for a second one);
- if the block still ends normally after the handler raised (code caught the exception and
  did not raise it again, or the block ended before the signal came again), the exception
  is raised as the block ends: a stopped command never exits 0;
- if the block ends with another exception that the handler's caused (in its `__cause__` /
  `__context__` chain: a library caught it where the signal came and raised its own; JAX
  turns an exception raised while its jit cache compares two pytrees' metadata into
  `ValueError: Exception raised while checking equality of metadata fields of pytree`),
  the handler's exception is raised in its place: the command stopped, it did not fail
  (`cvbench train` on JAX stopped by SIGTERM exited 2 with JAX's line in 1 of 5 runs).

A signal that comes while the block starts or ends, or while the hook runs, is given to
`handle` there; what it raises is raised at the next safe point, as above. Handlers can only
be installed from the main thread; elsewhere the block runs with the process' own handlers.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType

#: The signals that stop cvbench, and their names in its messages.
STOP_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}


class StopHandlers:
    """A context manager that calls `handle(signum)` on SIGTERM and SIGINT while its block
    runs (main thread only); what `handle` raises is never dropped (see the module).

    Args:
        handle: called with the signal's number in the main thread; it raises to stop the
            block, or records the signal and returns.

    Example:
        >>> import gc, os
        >>> def stop(signum):
        ...     raise InterruptedError(STOP_SIGNALS[signum])
        >>> def collecting(phase, info):  # the signal comes while a gc callback runs
        ...     gc.callbacks.remove(collecting)
        ...     os.kill(os.getpid(), signal.SIGTERM)  # `stop` raises here: Python drops it
        >>> try:
        ...     with StopHandlers(stop):
        ...         gc.callbacks.append(collecting)
        ...         _ = gc.collect()
        ... except InterruptedError as e:
        ...     print("stopped by", e)
        stopped by SIGTERM
    """

    def __init__(self, handle: Callable[[int], None]) -> None:
        self._handle = handle
        self._lock = threading.Lock()  # the sender's check and send, against `__exit__`
        self._open = False
        self._previous: dict[int, object] = {}
        self._previous_hook: Callable[..., object] | None = None
        self._raised: list[tuple[BaseException, int]] = []  # by `handle`, and its signal
        self._dropped: list[tuple[BaseException, int]] = []  # of those, to raise again
        self._asked = False  # the sending thread is asked to send once more
        self._sending = False  # that thread runs

    def __enter__(self) -> StopHandlers:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._raised, self._dropped = [], []
        self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        self._open = True
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._previous:
            return  # not the main thread: nothing was installed
        with self._lock:
            self._open = False  # no signal is sent again from here
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._previous_hook
        if error is None and (self._dropped or self._raised):
            raise (self._dropped or self._raised)[0][0]  # never delivered: deliver it now
        cause = self._raised_in_chain(error)
        if cause is not None:
            raise cause  # what the library made of it: its context

    def _raised_in_chain(self, error: BaseException | None) -> BaseException | None:
        """The handler's exception that caused `error` (in its `__cause__` / `__context__`
        chain), where `error` is not itself one of the handler's; else None."""
        mine = [e for e, _ in self._raised]
        if error is None or any(error is e for e in mine):
            return None
        seen: set[int] = set()
        link = error.__cause__ or error.__context__
        while link is not None and id(link) not in seen:
            seen.add(id(link))
            if any(link is e for e in mine):
                return link
            link = link.__cause__ or link.__context__
        return None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._in_own_code(frame):
            # Raised here it would be lost (the hook's exception is dropped) or stop
            # `__enter__` / `__exit__` half-way: kept, raised at the next safe point.
            if not (self._dropped and self._dropped[0][1] == signum):  # not the resend
                try:
                    self._handle(signum)
                except BaseException as e:
                    self._raised.append((e, signum))
                    self._dropped.append((e, signum))
            self._send_again()
            return  # the signal comes again once this code returned
        if self._dropped:  # what Python dropped: raise it again, now that it arrives
            raise self._dropped.pop(0)[0]
        try:
            self._handle(signum)
        except BaseException as e:
            self._raised.append((e, signum))
            raise

    def _unraisable(self, unraisable: object) -> None:
        """`sys.unraisablehook`: an exception of `handle` that Python dropped is kept to be
        raised again (its signal is sent again), silently; any other goes to the previous
        hook."""
        value = getattr(unraisable, "exc_value", None)
        mine = next((s for e, s in self._raised if e is value), None)
        if mine is None:
            if self._previous_hook is not None:
                self._previous_hook(unraisable)
            return
        if not any(e is value for e, _ in self._dropped):
            self._dropped.append((value, mine))
        self._send_again()

    def _send_again(self) -> None:
        """Asks a thread (started unless one runs) to send the signal of the first exception
        to raise again to the main thread, within 10 ms (once this code has returned),
        unless the block has ended. It is sent once per ask: a long call into C in the main
        thread is not flooded with signals while it runs. No lock here: the handler may run
        inside this code (it runs in the main thread, between any two bytecodes)."""
        if not self._dropped:
            return
        self._asked = True
        if not self._sending:
            self._sending = True
            threading.Thread(target=self._sender, name="cvbench-signal-again", daemon=True).start()

    def _sender(self) -> None:
        main = threading.main_thread().ident
        while self._open:
            time.sleep(0.01)
            if self._asked:
                self._asked = False
                with self._lock:
                    if self._open and self._dropped:
                        signal.pthread_kill(main, self._dropped[0][1])
        self._sending = False

    def _in_own_code(self, frame: FrameType | None) -> bool:
        """Whether the handler runs inside this object's `__enter__`, `__exit__` or hook."""
        own = {f.__code__ for f in (StopHandlers.__enter__, StopHandlers.__exit__)}
        own |= {StopHandlers._unraisable.__code__, StopHandlers._send_again.__code__}
        while frame is not None:
            if frame.f_code in own and frame.f_locals.get("self") is self:
                return True
            frame = frame.f_back
        return False
