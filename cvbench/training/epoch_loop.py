"""The Trainer's epoch loop: the training step, and callbacks called at their hooks.

`run_epochs` does what Keras' own `fit` loop does: it draws this rank's batches, runs the
step (`train_on_batch` on a `TrainingModel`), counts it in the run's `TrainState` and calls
its callbacks at the hooks `on_train_begin`, `on_epoch_begin`, `on_train_batch_begin`,
`on_train_batch_end`, `on_steps_end`, `on_epoch_end` and `on_train_end`, in list order.
Everything else is a callback with its own state (`cvbench.training.loop_callbacks`): the
run log's lines and records, TensorBoard scalars, checkpoints, the user's Keras callbacks,
the progress bar, the throughput and the stop signal.

The callbacks are `LoopCallback`s, not `keras.callbacks.Callback`s: a hook gets the typed
`LoopState` (the step's images/s, the logs averaged over ranks, the epoch's skipped steps,
the run's counters), where Keras' gets only a logs dict of the last step, and some hooks
take part in rank collectives (the stop signal) or raise after a checkpoint. The user's
Keras callbacks are called by one of them (`KerasCallbacks`), as Keras calls them.

What the loop itself keeps, because every rank must do it in the same order: the ranks'
agreement. At log steps and epoch ends the logs are averaged over ranks (`mean_over_ranks`)
and the ranks agree on an early stop (`any_rank_stopped`); one process stops at once.

Skipped steps (`TrainingModel`: a step whose loss or gradients are not finite changes no
variable; its logs say `skipped`) are counted, in the epoch and in the run
(`TrainState.skipped_steps`), and left out of the epoch means: an epoch's loss and metrics
are the means over its *applied* steps (NaN when none was applied).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from cvbench.training.inputs import BatchSource, batch_length, make_source, peek_batch_size
from cvbench.training.throughput import images_per_second

if TYPE_CHECKING:
    import keras

    from cvbench.training.distributed import Distribution

#: The key of `TrainingModel`'s step logs that is 1.0 for a skipped step.
SKIPPED = "skipped"
#: The `TrainState` field counting the run's skipped steps.
SKIPPED_STEPS = "skipped_steps"


@dataclass(eq=False)
class TrainState:
    """Where training stands, checkpointed and restored with the run (`Trainer.state` is its
    `to_dict()`).

    Attributes:
        step: steps done in the run.
        epoch: epochs done.
        batch_in_epoch: batches done in the current epoch.
        consumed: batches drawn from the data (the data position of a resume).
        data_seed: rank 0's seed ordering array data (-1: not chosen yet).
        skipped_steps: steps not applied (loss or gradients not finite).
        epoch_applied, epoch_skipped: the current epoch's applied and skipped steps.
        epoch_sums: the sums of the current epoch's applied steps' logs (this rank's), so
            that an epoch resumed part-way ends with the means over all its steps. Under
            Horovod a checkpoint also stores every rank's (`RANK_SUMS`, `gather_epoch_sums`)
            and each rank resumes from its own, so that the epoch's record (the mean over
            ranks of each rank's means) is the uninterrupted run's.

    Example:
        >>> state = TrainState(step=3)
        >>> state.to_dict()["step"], TrainState.from_dict({"epoch": 2}, state).to_dict()
        (3, {'step': 3, 'epoch': 2, 'batch_in_epoch': 0, 'consumed': 0, 'data_seed': -1, \
'skipped_steps': 0, 'epoch_applied': 0, 'epoch_skipped': 0, 'epoch_sums': {}})
    """

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    consumed: int = 0
    data_seed: int = -1
    skipped_steps: int = 0
    epoch_applied: int = 0
    epoch_skipped: int = 0
    epoch_sums: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The counters by name, and the epoch's sums (what a checkpoint stores)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(
        cls,
        values: Mapping[str, Any],
        default: TrainState | None = None,
        *,
        rank: int = 0,
        ranks: int = 1,
    ) -> TrainState:
        """The counters of `values` (a checkpoint's state) and the epoch's sums; those it
        lacks from `default` (or the initial ones). The sums are rank `rank`'s of
        `values[RANK_SUMS]` when it holds `ranks` ranks' (a checkpoint of as many ranks),
        else `values["epoch_sums"]`.

        Raises:
            ValueError: naming the field, when a value has the wrong type or range
                (`check_fields`).
        """
        check_fields(values)
        base = default if default is not None else cls()
        names = [f.name for f in dataclasses.fields(cls) if f.name != "epoch_sums"]
        sums = values.get("epoch_sums", base.epoch_sums)
        every_rank = values.get(RANK_SUMS)
        if isinstance(every_rank, list) and len(every_rank) == ranks > 1:
            sums = every_rank[rank]
        return cls(
            **{n: int(values.get(n, getattr(base, n))) for n in names},
            epoch_sums={str(k): float(v) for k, v in sums.items()},
        )

    def clear_epoch(self) -> None:
        """Clears the current epoch's counts and sums (a new epoch starts)."""
        self.epoch_applied = self.epoch_skipped = 0
        self.epoch_sums = {}


#: The key of a checkpoint's state holding every rank's `epoch_sums` (a list in rank order),
#: written under Horovod (`gather_epoch_sums`).
RANK_SUMS = "rank_epoch_sums"
#: The counters' least values (`data_seed` -1: not chosen yet; the others count).
_LEAST = {"data_seed": -1}


def check_fields(values: Mapping[str, Any]) -> None:
    """Checks the `TrainState` fields of `values` (a checkpoint's state): each counter an
    int (not a bool, a float or a string) at least 0 (`data_seed` at least -1), `epoch_sums`
    a dict of numbers, `RANK_SUMS` a list of such dicts (as many as `values["ranks"]`, when
    that is an int). Fields `values` lacks are not checked.

    Raises:
        ValueError: `"field 'step': ..."`, naming the field and saying what it holds.

    Example:
        >>> check_fields({"step": 3, "epoch_sums": {"loss": 0.5}})
        >>> check_fields({"step": "3"})
        Traceback (most recent call last):
        ...
        ValueError: field 'step': '3' (str), not an int at least 0
    """
    for f in dataclasses.fields(TrainState):
        if f.name in values and f.name != "epoch_sums":
            value, least = values[f.name], _LEAST.get(f.name, 0)
            if not is_count(value, least):
                raise ValueError(f"field {f.name!r}: {shown(value)}, not an int at least {least}")
    if "epoch_sums" in values:
        _check_sums("epoch_sums", values["epoch_sums"])
    if RANK_SUMS in values:
        every_rank, ranks = values[RANK_SUMS], values.get("ranks")
        if not isinstance(every_rank, list) or (is_count(ranks) and len(every_rank) != ranks):
            count = f"{ranks} " if is_count(ranks) else ""
            raise ValueError(
                f"field {RANK_SUMS!r}: {shown(every_rank)}, not a list of the {count}ranks' "
                "epoch sums"
            )
        for r, sums in enumerate(every_rank):
            _check_sums(f"{RANK_SUMS}[{r}]", sums)


def is_count(value: Any, least: int | None = None) -> bool:
    """Whether `value` is an int (not a bool), at least `least` when given."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    return is_int and (least is None or value >= least)


def shown(value: Any) -> str:
    """`value` for a message about a checkpoint's field: its repr cut to 40 characters,
    and its type: `'3' (str)`."""
    return f"{value!r:.40} ({type(value).__name__})"


def _check_sums(name: str, sums: Any) -> None:
    """Raises `ValueError` unless `sums` is a dict of numbers (ints or floats, not bools)."""
    if not isinstance(sums, dict):
        raise ValueError(f"field {name!r}: {shown(sums)}, not a dict of sums by log name")
    for key, value in sums.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"field {name!r}: {key!r} is {shown(value)}, not a number")


def gather_epoch_sums(distribution: Distribution, state: TrainState) -> list[dict] | None:
    """Every rank's `state.epoch_sums`, in rank order, for a checkpoint (`RANK_SUMS`): a
    collective, every rank calls it at the same step. None where rank 0's sums are every
    rank's, or unused: one process, steps over the global batch (JAX), or no step of the
    epoch done (`batch_in_epoch` 0, the same on every rank).

    The rows are gathered as float64 into zero-padded slots summed over ranks, so each sum
    arrives exactly (x + 0.0 == x): a rank resuming from its own sums ends the epoch with
    the same values as without the stop.
    """
    if distribution.size == 1 or distribution.global_steps or state.batch_in_epoch == 0:
        return None
    keys = sorted(state.epoch_sums)  # the same logs on every rank
    row = np.array([[state.epoch_sums[k] for k in keys]], np.float64).reshape(1, len(keys))
    rows = distribution.allgather_rows(row)
    return [{k: float(v) for k, v in zip(keys, r, strict=True)} for r in rows]


@dataclass(frozen=True)
class StepReport:
    """One logged step, averaged over ranks: what the step line, the run log's `step`
    record and TensorBoard's `train/` scalars show."""

    step: int
    epoch: int
    images_per_sec: float
    means: dict[str, float]
    skipped: bool
    learning_rate: float | None
    loss_scale: float | None
    skipped_steps: int


@dataclass
class LoopState:
    """What the loop and its callbacks share during one `fit` (in place of the trainer).

    Attributes:
        train: the run's counters (the Trainer's `TrainState`, updated in place).
        model: the model whose `train_on_batch` is the step (its `stop_training` asks to stop).
        distribution: the ranks (`cvbench.training.distributed.Distribution`).
        global_batch: images per step over all ranks.
        log_every: a step is logged (averaged over ranks: `report`) every this many (0: never).
        learning_rate: returns the current learning rate (None without an optimizer).
        loss_scale: returns the current loss scale (None without loss scaling).
        epoch: the epoch in progress (0-based).
        logs: the last step's logs (this rank's).
        step_seconds: the last step's wall time: its data and step, not the callbacks.
        images: the last step's images over all ranks.
        report: the last logged step (`StepReport`), None at other steps.
        steps_per_epoch: the steps of an epoch (None: unknown; `run_epochs` sets it).
        epoch_logs: the epoch's logs at `on_epoch_end` (means over ranks, `val_` results).
        stop: the ranks agreed to stop after this step or epoch.
    """

    train: TrainState
    model: keras.Model
    distribution: Distribution
    global_batch: int
    log_every: int = 0
    learning_rate: Callable[[], float | None] = lambda: None
    loss_scale: Callable[[], float | None] = lambda: None
    epoch: int = 0
    logs: dict[str, Any] = field(default_factory=dict)
    step_seconds: float = 0.0
    images: int = 0
    report: StepReport | None = None
    steps_per_epoch: int | None = None
    epoch_logs: dict[str, float] = field(default_factory=dict)
    stop: bool = False

    @property
    def ranks(self) -> int:
        """Number of ranks."""
        return self.distribution.size

    @property
    def images_per_sec(self) -> float:
        """The last step's images/s over all ranks."""
        return images_per_second(self.step_seconds, self.images)

    @property
    def applied(self) -> int:
        """This epoch's applied steps (`TrainState.epoch_applied`)."""
        return self.train.epoch_applied

    @property
    def skipped(self) -> int:
        """This epoch's skipped steps (`TrainState.epoch_skipped`)."""
        return self.train.epoch_skipped

    @property
    def sums(self) -> dict[str, float]:
        """This epoch's sums of the applied steps' logs (`TrainState.epoch_sums`)."""
        return self.train.epoch_sums

    def begin_epoch(self, epoch: int) -> None:
        """Starts `epoch`: its counts and sums cleared, unless it is resumed part-way
        (`train.batch_in_epoch` steps done: their counts and sums are the checkpoint's)."""
        self.epoch, self.epoch_logs = epoch, {}
        if self.train.batch_in_epoch == 0:
            self.train.clear_epoch()

    def count_step(self, logs: Mapping[str, Any], *, seconds: float, images: int) -> None:
        """Counts one step done: the run's counters, and the epoch's applied or skipped
        steps and sums (a skipped step's keys count, its values do not)."""
        self.logs, self.step_seconds, self.images = dict(logs), seconds, images
        state = self.train
        state.step += 1
        state.batch_in_epoch += 1
        state.consumed += 1
        applied = not logs.get(SKIPPED, 0.0)
        if applied:
            state.epoch_applied += 1
        else:
            state.epoch_skipped += 1
            state.skipped_steps += 1
        sums = state.epoch_sums
        for k, v in logs.items():
            if k != SKIPPED:
                sums[k] = sums.get(k, 0.0) + (float(v) if applied else 0.0)

    @property
    def steps(self) -> int:
        """This epoch's steps, applied and skipped."""
        return self.applied + self.skipped


class LoopCallback:
    """A callback of `run_epochs`: each hook gets the `LoopState`; the defaults do nothing.

    `on_steps_end` comes when the epoch's steps are done, before its evaluation (the
    validation) and `on_epoch_end`.
    """

    def on_train_begin(self, loop: LoopState) -> None:
        """Before the first epoch."""

    def on_epoch_begin(self, loop: LoopState) -> None:
        """Before the first step of `loop.epoch`."""

    def on_train_batch_begin(self, loop: LoopState) -> None:
        """Before a step, with its batch drawn."""

    def on_train_batch_end(self, loop: LoopState) -> None:
        """After a step (`loop.logs`, `loop.report` at log steps)."""

    def on_steps_end(self, loop: LoopState) -> None:
        """After the epoch's last step, before its evaluation."""

    def on_epoch_end(self, loop: LoopState) -> None:
        """After the epoch (`loop.epoch_logs`)."""

    def on_train_end(self, loop: LoopState) -> None:
        """After the last epoch (not after an error)."""


def run_epochs(
    loop: LoopState,
    source: BatchSource,
    epochs: int,
    callbacks: Sequence[LoopCallback],
    validation: Callable[[], dict[str, float]] | None = None,
) -> None:
    """Trains from `loop.train` until `epochs` epochs are done (`Trainer.fit`'s loop): the
    steps, the ranks' agreement on logs and stopping, and `callbacks` at their hooks.
    `validation` (e.g. the Trainer's evaluation) gives each epoch's `val_` logs."""
    loop.model.stop_training = False
    loop.steps_per_epoch = source.steps_per_epoch
    call(callbacks, "on_train_begin", loop)
    for epoch in range(loop.train.epoch, epochs):
        loop.begin_epoch(epoch)
        call(callbacks, "on_epoch_begin", loop)
        stopped = run_steps(loop, source, callbacks)
        call(callbacks, "on_steps_end", loop)
        if not stopped or loop.train.batch_in_epoch == loop.steps_per_epoch:
            loop.train.epoch, loop.train.batch_in_epoch = epoch + 1, 0  # its steps are done
        # Means over the applied steps (the same number on every rank).
        means = {k: v / loop.applied if loop.applied else math.nan for k, v in loop.sums.items()}
        loop.epoch_logs = mean_over_ranks(loop.distribution, means)
        if validation is not None:
            loop.epoch_logs.update({f"val_{k}": v for k, v in validation().items()})
        call(callbacks, "on_epoch_end", loop)
        if stopped or any_rank_stopped(loop):
            break
    call(callbacks, "on_train_end", loop)


def run_steps(loop: LoopState, source: BatchSource, callbacks: Sequence[LoopCallback]) -> bool:
    """The steps of `loop.epoch` from `loop.train`'s position; returns whether the ranks
    stopped before its end. A step's time is its data and step, not the callbacks."""
    state, steps = loop.train, source.steps_per_epoch
    batches = source.epoch(loop.epoch, state.batch_in_epoch, state.consumed)
    started = time.perf_counter()
    while steps is None or state.batch_in_epoch < steps:
        batch = next_batch(batches, loop, steps)
        if batch is None:
            return False
        x, y, sample_weight = batch
        call(callbacks, "on_train_batch_begin", loop)
        logs = loop.model.train_on_batch(x, y, sample_weight=sample_weight, return_dict=True)
        seconds = time.perf_counter() - started
        loop.count_step(logs, seconds=seconds, images=batch_length(x) * loop.ranks)
        loop.report = report_step(loop) if is_log_step(loop) else None
        call(callbacks, "on_train_batch_end", loop)
        # One process stops at once; ranks agree on stopping at log steps / epoch ends.
        if loop.stop or (loop.ranks == 1 and loop.model.stop_training):
            return True
        started = time.perf_counter()
    return False


def next_batch(batches: Iterator, loop: LoopState, steps: int | None) -> tuple | None:
    """The next `(x, y, sample_weight)`; None at the end of data of unknown length.

    Raises:
        RuntimeError: the data ran out before `steps` batches.
    """
    try:
        return next(batches)
    except StopIteration:
        if steps is None:
            return None
        raise RuntimeError(
            f"the training data ran out in epoch {loop.epoch + 1} after "
            f"{loop.train.batch_in_epoch} of {steps} batches: make the dataset repeat "
            "(dataset.repeat()) or lower steps_per_epoch"
        ) from None


def call(callbacks: Sequence[LoopCallback], hook: str, loop: LoopState) -> None:
    """Calls `hook` of each of `callbacks`, in order."""
    for callback in callbacks:
        getattr(callback, hook)(loop)


def is_log_step(loop: LoopState) -> bool:
    """Whether the step just done is logged (every `log_every` steps)."""
    return bool(loop.log_every) and loop.train.step % loop.log_every == 0


def report_step(loop: LoopState) -> StepReport:
    """The step just done averaged over ranks, with the ranks' agreement on stopping
    (`loop.stop`): a collective, every rank calls it at the same steps."""
    means = mean_over_ranks(loop.distribution, {k: float(v) for k, v in loop.logs.items()})
    skipped = bool(means.pop(SKIPPED, 0.0))  # the same on every rank
    loop.stop = any_rank_stopped(loop)
    return StepReport(
        step=loop.train.step,
        epoch=loop.epoch + 1,
        images_per_sec=loop.images_per_sec,
        means=means,
        skipped=skipped,
        learning_rate=loop.learning_rate(),
        loss_scale=loop.loss_scale(),
        skipped_steps=loop.train.skipped_steps,
    )


def any_rank_stopped(loop: LoopState) -> bool:
    """Whether any rank's model asked to stop (then every rank's does)."""
    flag = np.array([1.0 if loop.model.stop_training else 0.0])
    stopped = bool(loop.distribution.allreduce_max(flag)[0] > 0)
    loop.model.stop_training = stopped
    return stopped


def mean_over_ranks(distribution: Distribution, values: dict[str, float]) -> dict[str, float]:
    """`values` averaged over the ranks of `distribution` (the same keys on every rank)."""
    if not values:
        return {}
    keys = sorted(values)
    mean = distribution.allreduce_mean(np.array([values[k] for k in keys]))
    return {k: float(v) for k, v in zip(keys, mean, strict=True)}


def rank_source(
    state: TrainState,
    distribution: Distribution,
    train_data: Any,
    *,
    seed: int | None,
    batch_size: int | None,
    steps_per_epoch: int | None,
    shuffle: bool,
) -> tuple[Any, int]:
    """`(source, batch per rank)`: this rank's training batches for `Trainer.fit` (rank 0's
    data seed, `seed` or 0, broadcast into `state.data_seed` on the first fit), with every
    rank running the same steps per epoch (the shortest shard's: shards can differ in
    length).

    Raises:
        ValueError: several ranks and no known steps per epoch; a batch the distribution
            cannot split over its devices.
    """
    if state.data_seed < 0:
        # Rank 0's seed orders the data, so that ranks with their own seeds still agree.
        state.data_seed = distribution.broadcast_object(seed if seed is not None else 0)
    size = distribution.size
    source = make_source(
        train_data,
        batch_size=batch_size,
        steps_per_epoch=steps_per_epoch,
        rank=distribution.rank,
        size=size,
        shuffle=shuffle,
        seed=state.data_seed,
    )
    per_rank = source.batch_size or peek_batch_size(train_data)
    distribution.check_batch(per_rank)
    if size > 1:
        if source.steps_per_epoch is None:
            raise ValueError(
                "under Horovod every rank must run the same number of steps: pass steps_per_epoch"
            )
        # Shards can differ in length: every rank runs the shortest one's steps.
        fewest = -distribution.allreduce_max(np.array([-source.steps_per_epoch]))[0]
        source.steps_per_epoch = int(fewest)
    return source, per_rank
