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
the process' own handlers stay, and the signals act as they would without cvbench.

Outside `fit`'s epochs (building the model, the final evaluation and export, and every other
command) the `cvbench` command's own handler stops at once (`cvbench.cli.stop_on_signals`:
one line, the same exit codes, half-written outputs removed); `StopRequest` installs its
handlers over it while training and puts it back after.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from cvbench.utils.errors import CvbenchError

#: The signals a run stops on, and their names in messages.
STOP_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}


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
        >>> with StopRequest() as request:
        ...     os.kill(os.getpid(), signal.SIGTERM)
        ...     request.signum == signal.SIGTERM
        True
        >>> request.signum is None  # handlers put back, request cleared
        True
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        self.signum = None
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        self.signum = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        if self.signum is None:
            self.signum = signum
