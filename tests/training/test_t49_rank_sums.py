"""An epoch resumed part-way under Horovod ends with the record of the uninterrupted run: a
checkpoint holds every rank's sums of the epoch's steps (`gather_epoch_sums`), and each rank
resumes from its own (`TrainState.from_dict(..., rank=, ranks=)`), where it used to resume
from rank 0's. Here with ranks simulated by threads; `test_t49_horovod_resume.py` runs two
Horovod ranks."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from cvbench.training.distribution_base import Distribution
from cvbench.training.epoch_loop import RANK_SUMS, TrainState, gather_epoch_sums, mean_over_ranks


class Hub:
    """What the simulated ranks share: each collective's values, by rank."""

    def __init__(self, size: int) -> None:
        self.size, self.values = size, [None] * size
        self.barrier = threading.Barrier(size)


class ThreadRank(Distribution):
    """Rank `rank` of `hub.size` ranks run as threads: a collective waits for every rank."""

    def __init__(self, rank: int, hub: Hub) -> None:
        self.rank, self.size, self.hub = rank, hub.size, hub

    def _reduce(self, values, combine):
        hub = self.hub
        hub.values[self.rank] = np.asarray(values, np.float64)
        hub.barrier.wait()
        out = combine(np.stack(hub.values))
        hub.barrier.wait()  # every rank has read before the next collective writes
        return out

    def allreduce_sum(self, values):
        return self._reduce(values, lambda v: v.sum(axis=0))

    def allreduce_mean(self, values):
        return self._reduce(values, lambda v: v.sum(axis=0) / len(v))

    def allreduce_max(self, values):
        return self._reduce(values, lambda v: v.max(axis=0))


def on_ranks(size, work):
    """`work(distribution)` on `size` thread ranks; their results in rank order."""
    hub, results = Hub(size), [None] * size

    def run(rank):
        results[rank] = work(ThreadRank(rank, hub))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


# Each rank's sums: values whose sum with 0.0 (the gather's padding) is exact, and which no
# other rank shares.
SUMS = [
    {"loss": 0.1 + 0.2, "accuracy": 1e300},
    {"loss": math.nan, "accuracy": -0.5},
    {"loss": 3.0, "accuracy": 1e-310},
]


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("size", [2, 3])
def test_every_rank_gathers_every_ranks_sums_exactly(size):
    def gather(distribution):
        state = TrainState(batch_in_epoch=1, epoch_sums=dict(SUMS[distribution.rank]))
        return gather_epoch_sums(distribution, state)

    for gathered in on_ranks(size, gather):
        assert len(gathered) == size
        for mine, expected in zip(gathered, SUMS[:size], strict=True):
            assert mine.keys() == expected.keys()
            for key, value in expected.items():
                assert (math.isnan(value) and math.isnan(mine[key])) or mine[key] == value


@pytest.mark.backend_agnostic
def test_nothing_is_gathered_where_rank_0s_sums_serve():
    state = TrainState(batch_in_epoch=1, epoch_sums={"loss": 1.0})
    assert gather_epoch_sums(Distribution(), state) is None  # one process
    # No step of the epoch done (an epoch end): the sums are cleared before they are used.
    done = TrainState(batch_in_epoch=0, epoch_sums={"loss": 1.0})
    assert on_ranks(2, lambda d: gather_epoch_sums(d, done)) == [None, None]

    class Global(ThreadRank):
        global_steps = True  # JAX: the steps' logs are already the global batch's

    assert gather_epoch_sums(Global(0, Hub(2)), state) is None


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("ranks", [2, 3])
def test_each_rank_resumes_from_its_own_sums(ranks):
    every = [{"loss": float(r + 1)} for r in range(ranks)]
    values = {"batch_in_epoch": 1, "epoch_sums": every[0], RANK_SUMS: every, "ranks": ranks}
    for rank in range(ranks):
        state = TrainState.from_dict(values, rank=rank, ranks=ranks)
        assert state.epoch_sums == {"loss": rank + 1.0}
    # On another number of ranks (the sums are then cleared), and in one process: rank 0's.
    assert TrainState.from_dict(values, rank=1, ranks=ranks + 1).epoch_sums == {"loss": 1.0}
    assert TrainState.from_dict(values).epoch_sums == {"loss": 1.0}


@pytest.mark.backend_agnostic
def test_the_resumed_epochs_record_is_the_uninterrupted_ones():
    # 2 ranks, 2 applied steps each: rank 0's losses 1 then 2, rank 1's 3 then 4. The epoch's
    # record is the mean over ranks of each rank's mean: ((1 + 2) / 2 + (3 + 4) / 2) / 2 = 2.5.
    # Stopped after the first step and resumed from rank 0's sums, rank 1 ended with
    # (1 + 4) / 2 and the record was ((1 + 2) / 2 + (1 + 4) / 2) / 2 = 2.0.
    before, after = [1.0, 3.0], [2.0, 4.0]

    def resumed(distribution):
        rank = distribution.rank
        state = TrainState(batch_in_epoch=1, epoch_applied=1, epoch_sums={"loss": before[rank]})
        stored = dict(state.to_dict(), ranks=2)  # rank 0 writes its own, and every rank's
        stored[RANK_SUMS] = gather_epoch_sums(distribution, state)
        stored = distribution.broadcast_object(stored)  # identity here: rank 0's is the same
        state = TrainState.from_dict(stored, rank=rank, ranks=2)
        state.epoch_sums["loss"] += after[rank]
        state.epoch_applied += 1
        means = {k: v / state.epoch_applied for k, v in state.epoch_sums.items()}
        return mean_over_ranks(distribution, means)

    assert on_ranks(2, resumed) == [{"loss": 2.5}, {"loss": 2.5}]
