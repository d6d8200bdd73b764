"""The Trainer's epoch loop: steps, logs, checkpoints and the end-of-epoch evaluation.

`Trainer.fit` sets the run up (this rank's data source, `rank_source`; optimizer, rank
sync, resume) and calls `run_epochs`; everything that happens per step and per epoch is
here. Ranks agree on stopping at log steps and epoch ends (`any_rank_stopped`), and metrics
printed or logged are averaged over ranks (`mean_over_ranks`).

Skipped steps (`TrainingModel`: a step whose loss or gradients are not finite changes no
variable; its logs say `skipped`) are counted, in the epoch and in the run
(`trainer.state["skipped_steps"]`), and left out of the epoch means: an epoch's loss and
metrics are the means over its *applied* steps (NaN when none was applied). The step line
of a skipped step says so; the step and epoch records and TensorBoard scalars carry the
counts and the current loss scale.

A SIGTERM or SIGINT during the loop (`cvbench.training.signals.StopRequest`) stops it after
the step in progress, on every rank after the same step: rank 0 checkpoints that step and the
loop raises `TrainingInterruptedError` naming the checkpoint, from which `resume` continues.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from cvbench.training.checkpoint import checkpoint_name
from cvbench.training.inputs import BatchSource, batch_length, make_source, peek_batch_size
from cvbench.training.run_log import RunLog
from cvbench.training.signals import STOP_SIGNALS, StopRequest, TrainingInterruptedError
from cvbench.training.throughput import STEP_HEADER, ThroughputMeter, format_step_line

#: The key of `TrainingModel`'s step logs that is 1.0 for a skipped step.
SKIPPED = "skipped"
#: The key of `trainer.state` counting the run's skipped steps.
SKIPPED_STEPS = "skipped_steps"


def run_epochs(
    trainer: Any,
    source: BatchSource,
    epochs: int,
    callbacks,
    log: RunLog,
    validation,
    stop_request: StopRequest | None = None,
) -> None:
    """Trains `trainer` from `trainer.state` until `epochs` epochs are done (`Trainer.fit`'s
    loop): steps, step and epoch logs, checkpoints, the epoch-end evaluation (`validation` is
    `(data or function, steps, batch size)`), early stop agreed by all ranks, and the
    throughput summary (`trainer.throughput`)."""
    model = trainer.training_model
    model.stop_training = False
    meter = ThroughputMeter(trainer.global_batch, trainer.config.burn_in_steps)
    log.record(
        "start",
        precision=trainer.precision,
        ranks=trainer.size,
        devices=trainer.distribution.num_devices,
        global_batch=trainer.global_batch,
        resumed_step=trainer.state["step"],
    )
    if trainer.config.log_every:
        log.print(STEP_HEADER)
    callbacks.on_train_begin()
    trainer.state.setdefault(SKIPPED_STEPS, 0)
    saved_step = -1
    last_logs: dict[str, float] = {}
    for epoch in range(trainer.state["epoch"], epochs):
        callbacks.on_epoch_begin(epoch)
        log.start_bar(
            source.steps_per_epoch or 0, trainer.state["batch_in_epoch"], f"epoch {epoch + 1}"
        )
        sums: dict[str, float] = {}
        count = skipped = 0  # applied and skipped steps of this epoch
        stop = False
        batches = source.epoch(epoch, trainer.state["batch_in_epoch"], trainer.state["consumed"])
        last = time.perf_counter()
        index = trainer.state["batch_in_epoch"]
        while source.steps_per_epoch is None or index < source.steps_per_epoch:
            try:
                x, y, sample_weight = next(batches)
            except StopIteration:
                if source.steps_per_epoch is None:
                    break
                raise RuntimeError(
                    f"the training data ran out in epoch {epoch + 1} after {index} of "
                    f"{source.steps_per_epoch} batches: make the dataset repeat "
                    "(dataset.repeat()) or lower steps_per_epoch"
                ) from None
            callbacks.on_train_batch_begin(index)
            logs = model.train_on_batch(x, y, sample_weight=sample_weight, return_dict=True)
            now = time.perf_counter()
            rate = meter.record(now - last, batch_length(x) * trainer.size)
            last = now
            index += 1
            trainer.state.update(
                step=trainer.state["step"] + 1,
                batch_in_epoch=index,
                consumed=trainer.state["consumed"] + 1,
            )
            applied = not logs.get(SKIPPED, 0.0)
            if applied:
                count += 1
            else:
                skipped += 1
                trainer.state[SKIPPED_STEPS] += 1
            for k, v in logs.items():
                if k != SKIPPED:  # a skipped step's keys count, its values do not
                    sums[k] = sums.get(k, 0.0) + (float(v) if applied else 0.0)
            step = trainer.state["step"]
            if trainer.config.log_every and step % trainer.config.log_every == 0:
                stop = log_step(trainer, log, epoch, rate, logs)
            if trainer.config.checkpoint_every and step % trainer.config.checkpoint_every == 0:
                trainer.save_checkpoint()
                saved_step = step
            callbacks.on_train_batch_end(index - 1, logs)
            log.advance_bar({"loss": float(logs.get("loss", math.nan))})
            stop_if_signalled(trainer, stop_request, log, saved_step)
            # One process stops at once; ranks agree on stopping at log steps / epoch ends.
            stop = stop or (trainer.size == 1 and model.stop_training)
            if stop:
                break
            last = time.perf_counter()  # time data + step only, not logging/checkpoints
        log.close_bar()
        if not stop:
            trainer.state.update(epoch=epoch + 1, batch_in_epoch=0)
        # Means over the applied steps (the same number on every rank).
        epoch_logs = mean_over_ranks(
            trainer, {k: v / count if count else math.nan for k, v in sums.items()}
        )
        if validation[0] is not None:
            val = (
                validation[0]()  # e.g. a task's evaluation
                if callable(validation[0])
                else trainer.evaluate(validation[0], steps=validation[1], batch_size=validation[2])
            )
            epoch_logs.update({f"val_{k}": v for k, v in val.items()})
        if trainer.state["step"] != saved_step:
            trainer.save_checkpoint()
            saved_step = trainer.state["step"]
        log_epoch(trainer, log, epoch, epoch_logs, skipped=skipped, steps=count + skipped)
        callbacks.on_epoch_end(epoch, epoch_logs)
        stop_if_signalled(trainer, stop_request, log, saved_step)
        last_logs = epoch_logs
        if stop or any_rank_stopped(trainer):
            break
    callbacks.on_train_end(last_logs)
    summary = meter.summary()
    if summary is not None:
        log.print("-" * 64)
        log.print(summary.format())
        log.print("-" * 64)
        log.record("throughput", **summary.to_dict())
    trainer.throughput = summary


def stop_if_signalled(
    trainer: Any, request: StopRequest | None, log: RunLog, saved_step: int
) -> None:
    """Raises `TrainingInterruptedError` after rank 0 checkpointed the current step, when a stop
    signal reached any rank (every rank asks, after every step, so all stop together)."""
    if request is None:
        return
    signum = request.signum or 0
    if trainer.size > 1:
        signum = int(trainer.distribution.allreduce_max(np.array([float(signum)]))[0])
    if not signum:
        return
    log.close_bar()
    step = trainer.state["step"]
    if step != saved_step:
        trainer.save_checkpoint()  # rank 0
    directory = trainer.checkpoint_dir  # the same on every rank
    path = None if directory is None else str(directory / checkpoint_name(step))
    log.record("interrupted", signal=STOP_SIGNALS.get(signum, str(signum)), step=step)
    raise TrainingInterruptedError(signum, step, path)


def any_rank_stopped(trainer: Any) -> bool:
    """Whether any rank's model asked to stop (then every rank's does)."""
    flag = np.array([1.0 if trainer.training_model.stop_training else 0.0])
    stopped = bool(trainer.distribution.allreduce_max(flag)[0] > 0)
    trainer.training_model.stop_training = stopped
    return stopped


def mean_over_ranks(trainer: Any, values: dict[str, float]) -> dict[str, float]:
    """`values` averaged over ranks (the same keys on every rank)."""
    if not values:
        return {}
    keys = sorted(values)
    mean = trainer.distribution.allreduce_mean(np.array([values[k] for k in keys]))
    return {k: float(v) for k, v in zip(keys, mean, strict=True)}


def log_step(trainer: Any, log: RunLog, epoch: int, rate: float, logs: dict) -> bool:
    """Prints/records one step on rank 0; returns whether any rank asked to stop."""
    means = mean_over_ranks(trainer, {k: float(v) for k, v in logs.items()})
    skipped = bool(means.pop(SKIPPED, 0.0))  # the same on every rank
    stopped = any_rank_stopped(trainer)
    step = trainer.state["step"]
    lr, scale = trainer.learning_rate, trainer.loss_scale
    loss = means.get("loss", math.nan)
    line = format_step_line(step, epoch + 1, rate, loss, lr if lr is not None else math.nan)
    if skipped:
        line += "  skipped: loss or gradients not finite" + (
            f", loss scale now {scale:g}" if scale is not None else ""
        )
    log.print(line)
    log.record(
        "step",
        step=step,
        epoch=epoch + 1,
        images_per_sec=rate,
        lr=lr,
        loss_scale=scale,
        skipped=skipped,
        skipped_steps=trainer.state[SKIPPED_STEPS],
        **means,
    )
    scalars = dict(
        means,
        images_per_sec=rate,
        learning_rate=lr,
        skipped_steps=trainer.state[SKIPPED_STEPS],
    )
    if scale is not None:
        scalars["loss_scale"] = scale
    log.scalars(step, scalars, prefix="train/")
    return stopped


def log_epoch(
    trainer: Any, log: RunLog, epoch: int, logs: dict[str, float], *, skipped: int, steps: int
) -> None:
    """Prints, records and plots one epoch's logs (rank 0), with its `skipped` steps out of
    `steps`, the run's skipped steps and the loss scale."""
    total, scale = trainer.state[SKIPPED_STEPS], trainer.loss_scale
    text = "  ".join(f"{k} {v:.4f}" for k, v in sorted(logs.items()))
    text += f"  skipped {skipped} of {steps} steps ({total} in the run)"
    if scale is not None:
        text += f"  loss scale {scale:g}"
    log.print(f"epoch {epoch + 1}: {text}")
    counts = {"skipped": skipped, "skipped_steps": total}
    log.record(
        "epoch", epoch=epoch + 1, step=trainer.state["step"], loss_scale=scale, **counts, **logs
    )
    scalars = dict(logs, **counts)
    if scale is not None:
        scalars["loss_scale"] = scale
    log.scalars(trainer.state["step"], scalars, prefix="epoch/")


def rank_source(
    trainer: Any,
    train_data: Any,
    *,
    batch_size: int | None,
    steps_per_epoch: int | None,
    shuffle: bool,
) -> tuple[Any, int]:
    """`(source, batch per rank)`: this rank's training batches for `Trainer.fit` (rank 0's
    data seed broadcast on the first fit), with every rank running the same steps per epoch
    (the shortest shard's: shards can differ in length).

    Raises:
        ValueError: several ranks and no known steps per epoch; a batch the distribution
            cannot split over its devices.
    """
    if trainer.state["data_seed"] < 0:
        # Rank 0's seed orders the data, so that ranks with their own seeds still agree.
        seed = trainer.config.seed if trainer.config.seed is not None else 0
        trainer.state["data_seed"] = trainer.distribution.broadcast_object(seed)
    source = make_source(
        train_data,
        batch_size=batch_size,
        steps_per_epoch=steps_per_epoch,
        rank=trainer.rank,
        size=trainer.size,
        shuffle=shuffle,
        seed=trainer.state["data_seed"],
    )
    per_rank = source.batch_size or peek_batch_size(train_data)
    trainer.distribution.check_batch(per_rank)
    if trainer.size > 1:
        if source.steps_per_epoch is None:
            raise ValueError(
                "under Horovod every rank must run the same number of steps: pass steps_per_epoch"
            )
        # Shards can differ in length: every rank runs the shortest one's steps.
        fewest = -trainer.distribution.allreduce_max(np.array([-source.steps_per_epoch]))[0]
        source.steps_per_epoch = int(fewest)
    return source, per_rank
