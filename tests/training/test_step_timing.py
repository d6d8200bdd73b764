"""`Trainer.benchmark`'s timing: every step a window of `measure_throughput`, epochs of the
source one after another, NVIDIA's lines, the burn-in left out of the summary."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cvbench.training.inputs import make_source
from cvbench.training.run_log import RunLog
from cvbench.training.step_timing import BatchSteps, endless_batches, time_steps
from cvbench.training.throughput import STEP_HEADER

pytestmark = pytest.mark.backend_agnostic


def test_endless_batches_restart_epochs_and_refuse_empty_data():
    got = list(itertools.islice(endless_batches([1, 2]), 5))
    assert got == [1, 2, 1, 2, 1]
    by_epoch = list(
        itertools.islice(endless_batches(lambda epoch: [10 * epoch, 10 * epoch + 1]), 5)
    )
    assert by_epoch == [0, 1, 10, 11, 20]
    with pytest.raises(ValueError, match="no batches in epoch 0"):
        next(endless_batches([]))
    with pytest.raises(ValueError, match=r"no batches in epoch 1 \(after 2 batches\)"):
        list(endless_batches(lambda epoch: [1, 2] if epoch == 0 else []))


def test_batch_steps_count_the_images_of_every_rank():
    seen = []
    batches = iter([(np.zeros((4, 2)), np.ones(4)), (np.zeros((3, 2)), np.ones(3))])
    steps = BatchSteps(lambda x, y, w: seen.append(len(x)) or 0.5, batches, ranks=2)
    steps.first_step()
    steps.run(1)
    assert seen == [4, 3] and steps.loss == 0.5
    assert (steps.global_batch, steps.images_per_step) == (8, 6)  # first and last, x 2 ranks


def _source(rows: int, batch_size: int):
    x = np.arange(rows, dtype="float32").reshape(rows, 1)
    return make_source(
        (x, x[:, 0]), batch_size=batch_size, steps_per_epoch=None, rank=0, size=1,
        shuffle=False, seed=0,
    )  # fmt: skip


def test_every_step_runs_once_across_epochs_and_is_logged(capsys):
    seen = []

    def step(x, y, sample_weight):
        seen.append(int(x[0, 0]))
        return float(len(seen))  # the loss of step n is n

    # 6 rows in batches of 2: 3 batches an epoch; 1 burn-in + 4 measured steps need 2 epochs.
    summary = time_steps(
        step, _source(6, 2), total=5, burn_in=1, ranks=3,
        log=RunLog(None, enabled=True, progress_bar=False), log_every=2,
        learning_rate=lambda: None,
    )  # fmt: skip
    assert seen == [0, 2, 4, 0, 2]  # first rows of batches 0, 1, 2, then epoch 2 again
    assert (summary.steps, summary.global_batch) == (4, 6)  # burn-in left out; 2 rows x 3 ranks
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == STEP_HEADER
    # Steps 2 and 4 logged, with their own losses; no learning rate prints 0.
    assert [(line.split()[0], line.split()[3], line.split()[4]) for line in lines[1:3]] == [
        ("2", "2.000", "0.00000"),
        ("4", "4.000", "0.00000"),
    ]
    assert lines[3] == "-" * 64 and lines[4].startswith("Images/sec: ") and len(lines) == 6


def test_nothing_left_to_measure_and_empty_data_are_errors():
    log = RunLog(None, enabled=False, progress_bar=False)
    kwargs = dict(ranks=1, log=log, log_every=0, learning_rate=lambda: None)
    with pytest.raises(ValueError, match="no steps left to measure: 2 steps, burn-in 2"):
        time_steps(lambda x, y, w: 0.0, _source(4, 2), total=2, burn_in=2, **kwargs)
    empty = make_source(
        [], batch_size=None, steps_per_epoch=None, rank=0, size=1, shuffle=False, seed=0
    )
    with pytest.raises(ValueError, match="no batches in epoch 0"):
        time_steps(lambda x, y, w: 0.0, empty, total=1, burn_in=0, **kwargs)


def test_docstring_examples():
    import doctest

    from cvbench.training import step_timing

    outcome = doctest.testmod(step_timing)
    assert outcome.attempted > 0 and outcome.failed == 0
