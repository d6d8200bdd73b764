"""Stopping a run on SIGTERM or SIGINT without losing the steps it trained.

Cluster schedulers (Slurm, Kubernetes, ...) send SIGTERM before they preempt or end a job,
and a user stops a run with Ctrl-C (SIGINT). During `Trainer.fit` both only *ask* the run to
stop (`StopRequest`): the step in progress finishes, every rank agrees to stop after the same
step, rank 0 writes a checkpoint of that step, and `fit` raises `TrainingInterruptedError`, whose
message names the checkpoint; the `cvbench` command prints it and exits with 128 + the
signal's number (143 for SIGTERM, 130 for SIGINT), as a shell does for a process the signal
ended. `--resume` then continues at the next step. A second SIGINT while the first is being
handled stops at once (`KeyboardInterrupt`), for a user who does not want to wait.

Handlers can only be installed from the main thread; elsewhere (a `fit` in a worker thread)
the process' own handlers stay, and the signals act as they would without cvbench. They are
installed with `cvbench.utils.signals.StopHandlers`, as the command's own: a second Ctrl-C's
`KeyboardInterrupt` that Python drops (raised while a garbage-collection callback such as
JAX's runs) is raised again, never lost. A signal that comes after the last step the run
could stop at (the request is still open when `fit`'s loop ends) is passed on to the handler
that was there before, which acts on it: the command stops, never exits 0.

Outside `fit`'s epochs (building the model, the final evaluation and export, and every other
command) the `cvbench` command's own handler stops at once (`cvbench.cli.stop_on_signals`:
one line, the same exit codes, half-written outputs removed); `StopRequest` installs its
handlers over it while training and puts it back after.
"""

from __future__ import annotations

import signal
import threading
from types import TracebackType

from cvbench.utils.errors import CvbenchError
from cvbench.utils.signals import STOP_SIGNALS, StopHandlers


class TrainingInterruptedError(CvbenchError):
    """A run stopped by a signal after saving a checkpoint of the last step it trained.

    Attributes:
        signum: the signal's number.
        step: the step the run stopped after.
        checkpoint: the checkpoint written for it (None without a log directory).
    """

    def __init__(self, signum: int, step: int, checkpoint: str | None) -> None:
        name = STOP_SIGNALS.get(signum, f"signal {signum}")
        if checkpoint is None:
            kept = "no checkpoint was written (no log directory)"
        else:
            kept = f"checkpoint {checkpoint} written; rerun with resume=True to continue"
        super().__init__(f"{name} received: stopped after step {step}, {kept}")
        self.signum, self.step, self.checkpoint = signum, step, checkpoint

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, a shell's code for a process a signal ended."""
        return 128 + self.signum


class StopRequest:
    """A context manager that turns SIGTERM and SIGINT into a request to stop.

    Example:
        >>> import os
        >>> try:
        ...     with StopRequest() as request:
        ...         os.kill(os.getpid(), signal.SIGTERM)  # recorded: the step goes on
        ...         print(request.signum == signal.SIGTERM)
        ...         raise TrainingInterruptedError(request.signum, 7, None)  # at its end
        ... except TrainingInterruptedError as e:
        ...     print(e.exit_code, request.signum)  # handlers put back, request cleared
        True
        143 None
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._handlers = StopHandlers(self._handle)

    def __enter__(self) -> StopRequest:
        self.signum = None
        self._handlers.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self._handlers.__exit__(kind, error, traceback)  # raises a dropped KeyboardInterrupt
        finally:
            # read once the handlers are put back: a signal while they were being put back
            # is recorded here, one after goes to the handler put back (review V F2)
            signum, self.signum = self.signum, None
        if error is None and signum is not None and self._installed():
            # asked after the last step the run could stop at: the handler put back acts
            signal.raise_signal(signum)

    @staticmethod
    def _installed() -> bool:
        return threading.current_thread() is threading.main_thread()

    def _handle(self, signum: int) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        if self.signum is None:
            self.signum = signum
