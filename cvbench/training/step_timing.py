"""`Trainer.benchmark`'s timing: the Trainer's steps as a `Workload`, each step timed alone.

The timing itself is `measure_throughput`'s, the same that `cvbench benchmark` and the
benchmark suite use (`cvbench.benchmark.benchmark_cvbench`): here every window is one step,
so that each step gets NVIDIA's progress line, and the burn-in steps are left out of the
summary as `Trainer.fit`'s meter leaves them out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import keras

from cvbench.training.inputs import (
    BatchSource,
    batch_length,
    is_array_data,
    make_source,
    peek_batch_size,
    split_batch,
)
from cvbench.training.run_log import RunLog
from cvbench.training.throughput import (
    STEP_HEADER,
    ThroughputSummary,
    format_step_line,
    measure_throughput,
    summarize,
)


def endless_batches(data: Any) -> Iterator[Any]:
    """The batches of `data` epoch after epoch, for as long as a benchmark needs them.

    Example:
        >>> list(itertools.islice(endless_batches(lambda epoch: [epoch, -epoch - 1]), 5))
        [0, -1, 1, -2, 2]

    Args:
        data: a re-iterable of batches (a `tf.data.Dataset`, a list...) or a function
            `epoch -> iterable of batches` (a task's `TrainData.data`).

    Raises:
        ValueError: when an epoch has no batches.
    """
    done = 0
    for epoch in itertools.count():
        empty = True
        for batch in data(epoch) if callable(data) and not hasattr(data, "__iter__") else data:
            empty = False
            done += 1
            yield batch
        if empty:
            raise ValueError(f"the data has no batches in epoch {epoch} (after {done} batches)")


class BatchSteps:
    """A `Workload` of `step(x, y, sample_weight) -> loss` over a stream of batches.

    Args:
        step: runs one batch and returns its loss (NaN when there is none); it returns once
            the step is done (e.g. `train_on_batch`, which copies its logs to the host).
        batches: an iterator of `x`, `(x, y)` or `(x, y, sample_weight)` batches.
        ranks: number of ranks (images count all of them).

    Attributes:
        images_per_step: images of the last step over all ranks.
        global_batch: images of the first step over all ranks.
        loss: the last step's loss.
    """

    def __init__(self, step: Callable[..., float], batches: Iterator, *, ranks: int = 1) -> None:
        self.step = step
        self.batches = batches
        self.ranks = ranks
        self.images_per_step = 0
        self.global_batch = 0
        self.loss = float("nan")

    def first_step(self) -> None:
        self.run(1)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            x, y, sample_weight = split_batch(next(self.batches))
            self.loss = self.step(x, y, sample_weight)
            self.images_per_step = batch_length(x) * self.ranks
            self.global_batch = self.global_batch or self.images_per_step


def time_steps(
    step: Callable[..., float],
    source: BatchSource,
    *,
    total: int,
    burn_in: int,
    ranks: int,
    log: RunLog,
    log_every: int,
    learning_rate: Callable[[], float | None],
) -> ThroughputSummary:
    """Runs `step(x, y, sample_weight) -> loss` on `total` batches and times each one.

    Epochs of `source` follow one another until `total` batches have run. Each step is a
    window of one step of `measure_throughput`: its time includes reading the batch, not
    printing.

    Args:
        step: runs one batch and returns its loss (NaN when there is none).
        source: this rank's batches.
        total: batches to run (burn-in included).
        burn_in: first steps left out of the summary.
        ranks: number of ranks (images/s count all of them).
        log: where rank 0 prints (closed at the end).
        log_every: print a step line every this many steps (0: never).
        learning_rate: returns the rate to print (None prints 0).

    Returns:
        The summary over the steps after the burn-in (also printed).

    Raises:
        ValueError: when no step is left after the burn-in, or the data has no batches.
    """
    if total <= burn_in:
        raise ValueError(f"no steps left to measure: {total} steps, burn-in {burn_in}")
    batches = endless_batches(lambda epoch: source.epoch(epoch, 0, 0))
    workload = BatchSteps(step, batches, ranks=ranks)
    if log_every:
        log.print(STEP_HEADER)

    def on_window(name: str, index: int, rate: float) -> None:
        if log_every and (index + 1) % log_every == 0:
            lr = learning_rate() or 0.0
            log.print(format_step_line(index + 1, 1, rate, workload.loss, lr))

    measured = measure_throughput(
        {"steps": workload}, warmup_steps=0, windows=total, window_steps=1, on_window=on_window
    )["steps"]
    summary = summarize(measured.window_rates[burn_in:], global_batch=workload.global_batch)
    log.print("-" * 64)
    log.print(summary.format())
    log.print("-" * 64)
    log.close()
    return summary


def benchmark_source(
    data: Any, *, mode: str, steps: int, total: int, batch_size: int | None, rank: int, size: int
) -> tuple[BatchSource, int]:
    """`(source, batch per rank)`: this rank's batches for `Trainer.benchmark`'s `total`
    steps in `mode`, after checking `mode` and the measured `steps`.

    Raises:
        ValueError: `mode` is neither "train" nor "inference"; `steps` is not a positive int.
    """
    if mode not in ("train", "inference"):
        raise ValueError(f"mode must be 'train' or 'inference', got {mode!r}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    source = make_source(
        data,
        batch_size=batch_size,
        steps_per_epoch=None if is_array_data(data) else total,
        rank=rank,
        size=size,
        shuffle=False,
        seed=0,
    )
    return source, source.batch_size or peek_batch_size(data)


def model_step(model: keras.Model, mode: str) -> Callable[..., float]:
    """`step(x, y, sample_weight) -> loss` of the compiled `model`: a train step
    (`mode="train"`) or a forward pass copied to the host (NaN loss)."""

    def step(x, y, sample_weight) -> float:
        if mode == "inference":
            keras.tree.map_structure(keras.ops.convert_to_numpy, model.predict_on_batch(x))
            return math.nan
        logs = model.train_on_batch(x, y, sample_weight=sample_weight, return_dict=True)
        return float(logs.get("loss", math.nan))

    return step
