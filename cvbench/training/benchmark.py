"""Timing steps for `Trainer.benchmark`: per-step images/s after a burn-in, NVIDIA's format."""

from __future__ import annotations

import time
from collections.abc import Callable

from cvbench.training.inputs import BatchSource, batch_length
from cvbench.training.run_log import RunLog
from cvbench.training.throughput import (
    STEP_HEADER,
    ThroughputMeter,
    ThroughputSummary,
    format_step_line,
)


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

    Epochs of `source` follow one another until `total` batches have run. Each step's time
    runs from the end of the previous step (so it includes reading the batch) to the end of
    this one; printing is left out.

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
        ValueError: when no step is left after the burn-in.
    """
    if total <= burn_in:
        raise ValueError(f"no steps left to measure: {total} steps, burn-in {burn_in}")
    meter = None
    if log_every:
        log.print(STEP_HEADER)
    done, epoch = 0, 0
    last = time.perf_counter()
    while done < total:
        ran_any = False
        for x, y, sample_weight in source.epoch(epoch, 0, done):
            ran_any = True
            loss = step(x, y, sample_weight)
            now = time.perf_counter()
            images = batch_length(x) * ranks
            if meter is None:
                meter = ThroughputMeter(images, burn_in)
            rate = meter.record(now - last, images)
            done += 1
            if log_every and done % log_every == 0:
                log.print(format_step_line(done, 1, rate, loss, learning_rate() or 0.0))
            if done >= total:
                break
            last = time.perf_counter()
        if not ran_any:
            raise ValueError(f"the data ran out after {done} of {total} benchmark steps")
        epoch += 1
    summary = meter.summary()
    log.print("-" * 64)
    log.print(summary.format())
    log.print("-" * 64)
    log.close()
    return summary
