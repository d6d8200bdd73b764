"""The callbacks of the Trainer's epoch loop, each with its own state: the run log's lines
and records, TensorBoard scalars, checkpoints, the user's Keras callbacks, the progress bar,
the throughput and the stop signal (`cvbench.training.epoch_loop` calls them at Keras' hooks).

`Trainer.fit` calls them in the order of `loop_callbacks`: what a step or epoch prints and
records comes first, then its checkpoint, then the user's callbacks (which see the step as
logged and checkpointed), the bar, the throughput and last the stop signal, which stops the
run after a checkpoint of the step all the others have seen.

A SIGTERM or SIGINT during the loop (`cvbench.training.signals.StopRequest`) stops it after
the step in progress, on every rank after the same step: rank 0 checkpoints that step and the
loop raises `TrainingInterruptedError` naming the checkpoint, from which `resume` continues.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np

from cvbench.training.checkpoint import checkpoint_name
from cvbench.training.epoch_loop import LoopCallback, LoopState
from cvbench.training.run_log import RunLog
from cvbench.training.signals import STOP_SIGNALS, StopRequest, TrainingInterruptedError
from cvbench.training.throughput import (
    STEP_HEADER,
    ThroughputMeter,
    ThroughputSummary,
    format_step_line,
)


class RunLogLines(LoopCallback):
    """The printed lines and JSON-lines records of a run (rank 0's `log`): the `start`
    record and the step header, each logged step's line and `step` record, each epoch's
    line and `epoch` record.

    Args:
        log: the run's log (does nothing on other ranks than 0).
        precision: the run's precision policy, recorded at the start.
    """

    def __init__(self, log: RunLog, *, precision: str) -> None:
        self.log, self.precision = log, precision

    def on_train_begin(self, loop: LoopState) -> None:
        self.log.record(
            "start",
            precision=self.precision,
            ranks=loop.ranks,
            devices=loop.distribution.num_devices,
            global_batch=loop.global_batch,
            resumed_step=loop.train.step,
            resumed_epoch=loop.train.epoch,
        )
        if loop.log_every:
            self.log.print(STEP_HEADER)

    def on_train_batch_end(self, loop: LoopState) -> None:
        report = loop.report
        if report is None:
            return
        lr, scale = report.learning_rate, report.loss_scale
        loss = report.means.get("loss", math.nan)
        shown_lr = lr if lr is not None else math.nan
        line = format_step_line(report.step, report.epoch, report.images_per_sec, loss, shown_lr)
        if report.skipped:
            line += "  skipped: loss or gradients not finite" + (
                f", loss scale now {scale:g}" if scale is not None else ""
            )
        self.log.print(line)
        self.log.record(
            "step",
            step=report.step,
            epoch=report.epoch,
            images_per_sec=report.images_per_sec,
            lr=lr,
            loss_scale=scale,
            skipped=report.skipped,
            skipped_steps=report.skipped_steps,
            **report.means,
        )

    def on_epoch_end(self, loop: LoopState) -> None:
        """Prints and records the epoch's logs, with its skipped steps out of its steps, the
        run's skipped steps and the loss scale."""
        total, scale = loop.train.skipped_steps, loop.loss_scale()
        text = "  ".join(f"{k} {v:.4f}" for k, v in sorted(loop.epoch_logs.items()))
        text += f"  skipped {loop.skipped} of {loop.steps} steps ({total} in the run)"
        if scale is not None:
            text += f"  loss scale {scale:g}"
        self.log.print(f"epoch {loop.epoch + 1}: {text}")
        self.log.record(
            "epoch",
            epoch=loop.epoch + 1,
            step=loop.train.step,
            loss_scale=scale,
            skipped=loop.skipped,
            skipped_steps=total,
            **loop.epoch_logs,
        )


class TensorBoardScalars(LoopCallback):
    """TensorBoard scalars of the logged steps (`train/...`) and the epochs (`epoch/...`),
    written through the run's `log` (rank 0, TensorFlow backend, with a log dir)."""

    def __init__(self, log: RunLog) -> None:
        self.log = log

    def on_train_batch_end(self, loop: LoopState) -> None:
        report = loop.report
        if report is None:
            return
        scalars = dict(
            report.means,
            images_per_sec=report.images_per_sec,
            learning_rate=report.learning_rate,
            skipped_steps=report.skipped_steps,
        )
        if report.loss_scale is not None:
            scalars["loss_scale"] = report.loss_scale
        self.log.scalars(report.step, scalars, prefix="train/")

    def on_epoch_end(self, loop: LoopState) -> None:
        total = loop.train.skipped_steps
        scalars = dict(loop.epoch_logs, skipped=loop.skipped, skipped_steps=total)
        scale = loop.loss_scale()
        if scale is not None:
            scalars["loss_scale"] = scale
        self.log.scalars(loop.train.step, scalars, prefix="epoch/")


class Checkpointing(LoopCallback):
    """Checkpoints every `every` steps and at each epoch end, once per position (a step, and
    whether its epoch is done).

    The every-N checkpoint of an epoch's last step is written at that step, before the
    epoch's validation (a crash or a kill in the validation loses no step), recording the
    epoch's steps done but not its end; the epoch end then writes that step's checkpoint
    again, recording the epoch done, so a resume from it never ends that epoch again. A
    checkpoint that records the epoch's steps done but not its end (a kill during the
    validation, a stop after its last step, or data of unknown length) is resumed by doing
    that end once (the record, from the checkpointed sums; the validation; the checkpoint,
    rewritten as done).
    (Data of unknown length: an epoch's last step is known only at its end.)
    A run resumed from the checkpoint of a position (`saved_step`, `saved_epoch`) writes
    nothing before its first step unless that end is due: the file it resumed from is not
    rewritten (in a read-only checkpoint folder, it would fail).

    Args:
        save: writes a checkpoint of the current state (rank 0; `Trainer.save_checkpoint`).
        every: steps between checkpoints (0: only at epoch ends).
        directory: where `save` writes (None: nowhere), for the name of a step's checkpoint.
        saved_step: the step whose checkpoint is already written (the one resumed from),
            or -1: none.
        saved_epoch: the epochs done that checkpoint records (-1: none).
    """

    def __init__(
        self,
        save: Callable[[], Any],
        *,
        every: int,
        directory: Path | None,
        saved_step: int = -1,
        saved_epoch: int = -1,
    ) -> None:
        self.save, self.every, self.directory = save, every, directory
        self.saved_step, self.saved_epoch = saved_step, saved_epoch

    def on_train_batch_end(self, loop: LoopState) -> None:
        if self.every and loop.train.step % self.every == 0:
            self.save_step(loop)

    def on_epoch_end(self, loop: LoopState) -> None:
        self.save_unless_saved(loop)

    def save_step(self, loop: LoopState) -> None:
        """Checkpoints the current step."""
        self.save()
        self.saved_step, self.saved_epoch = loop.train.step, loop.train.epoch

    def save_unless_saved(self, loop: LoopState) -> None:
        """Checkpoints the current step unless a checkpoint of it with its epochs done is
        written."""
        if (loop.train.step, loop.train.epoch) != (self.saved_step, self.saved_epoch):
            self.save_step(loop)

    def path_of(self, step: int) -> str | None:
        """The checkpoint of `step` (the same on every rank), None without a directory."""
        return None if self.directory is None else str(self.directory / checkpoint_name(step))


class KerasCallbacks(LoopCallback):
    """The user's Keras callbacks (and the `History`), called as Keras' `fit` calls them:
    batch indices within the epoch, the step's logs, the epoch's logs averaged over ranks.

    Args:
        callbacks: a `keras.callbacks.CallbackList` over the training model.
    """

    def __init__(self, callbacks: keras.callbacks.CallbackList) -> None:
        self.callbacks = callbacks
        self.last_logs: dict[str, float] = {}

    def on_train_begin(self, loop: LoopState) -> None:
        self.callbacks.on_train_begin()

    def on_epoch_begin(self, loop: LoopState) -> None:
        self.callbacks.on_epoch_begin(loop.epoch)

    def on_train_batch_begin(self, loop: LoopState) -> None:
        self.callbacks.on_train_batch_begin(loop.train.batch_in_epoch)

    def on_train_batch_end(self, loop: LoopState) -> None:
        self.callbacks.on_train_batch_end(loop.train.batch_in_epoch - 1, loop.logs)

    def on_epoch_end(self, loop: LoopState) -> None:
        self.callbacks.on_epoch_end(loop.epoch, loop.epoch_logs)
        self.last_logs = loop.epoch_logs

    def on_train_end(self, loop: LoopState) -> None:
        self.callbacks.on_train_end(self.last_logs)


class ProgressBar(LoopCallback):
    """The epoch's progress bar (rank 0's `log`, when it shows one), closed before the
    epoch's evaluation.

    Args:
        log: the run's log, which draws the bar.
        steps_per_epoch: the bar's length (None: unknown).
    """

    def __init__(self, log: RunLog, steps_per_epoch: int | None) -> None:
        self.log, self.steps_per_epoch = log, steps_per_epoch

    def on_epoch_begin(self, loop: LoopState) -> None:
        self.log.start_bar(
            self.steps_per_epoch or 0, loop.train.batch_in_epoch, f"epoch {loop.epoch + 1}"
        )

    def on_train_batch_end(self, loop: LoopState) -> None:
        self.log.advance_bar({"loss": float(loop.logs.get("loss", math.nan))})

    def on_steps_end(self, loop: LoopState) -> None:
        self.log.close_bar()


class ThroughputCallback(LoopCallback):
    """The run's throughput: every step's images/s, and at the end NVIDIA's summary over
    the steps after the burn-in, printed between rules and recorded (`summary`).

    Args:
        log: the run's log.
        burn_in: first steps of this `fit` left out of the summary.
    """

    def __init__(self, log: RunLog, *, burn_in: int) -> None:
        self.log, self.burn_in = log, burn_in
        self.meter: ThroughputMeter | None = None
        self.summary: ThroughputSummary | None = None

    def on_train_begin(self, loop: LoopState) -> None:
        self.meter = ThroughputMeter(loop.global_batch, self.burn_in)

    def on_train_batch_end(self, loop: LoopState) -> None:
        self.meter.record(loop.step_seconds, loop.images)

    def on_train_end(self, loop: LoopState) -> None:
        self.summary = self.meter.summary()
        if self.summary is None:
            return
        self.log.print("-" * 64)
        self.log.print(self.summary.format())
        self.log.print("-" * 64)
        self.log.record("throughput", **self.summary.to_dict())


class StopOnSignal(LoopCallback):
    """Stops the run after a step or an epoch when a stop signal reached any rank: every
    rank asks after every step (a collective), so all stop together; the step is
    checkpointed (rank 0) and `TrainingInterruptedError` names its checkpoint.

    Args:
        request: the signals received (`StopRequest`), or None: never stops.
        log: the run's log (records the `interrupted` event).
        checkpoints: the run's `Checkpointing`, which saves the step unless it did.
    """

    def __init__(
        self, request: StopRequest | None, log: RunLog, checkpoints: Checkpointing
    ) -> None:
        self.request, self.log, self.checkpoints = request, log, checkpoints

    def on_train_batch_end(self, loop: LoopState) -> None:
        self.stop_if_signalled(loop)

    def on_epoch_end(self, loop: LoopState) -> None:
        self.stop_if_signalled(loop)

    def stop_if_signalled(self, loop: LoopState) -> None:
        """Raises `TrainingInterruptedError` after rank 0 checkpointed the current step, when
        a stop signal reached any rank."""
        if self.request is None:
            return
        signum = self.request.signum or 0
        if loop.ranks > 1:
            signum = int(loop.distribution.allreduce_max(np.array([float(signum)]))[0])
        if not signum:
            return
        self.log.close_bar()
        step = loop.train.step
        self.checkpoints.save_unless_saved(loop)  # rank 0
        self.log.record("interrupted", signal=STOP_SIGNALS.get(signum, str(signum)), step=step)
        raise TrainingInterruptedError(signum, step, self.checkpoints.path_of(step))


def loop_callbacks(
    log: RunLog,
    checkpoints: Checkpointing,
    user: KerasCallbacks,
    *,
    precision: str,
    steps_per_epoch: int | None,
    burn_in: int,
    stop_request: StopRequest | None,
) -> list[LoopCallback]:
    """`Trainer.fit`'s callbacks, in the order they are called (see the module docstring)."""
    return [
        RunLogLines(log, precision=precision),
        TensorBoardScalars(log),
        checkpoints,
        user,
        ProgressBar(log, steps_per_epoch),
        ThroughputCallback(log, burn_in=burn_in),
        StopOnSignal(stop_request, log, checkpoints),
    ]
