"""`EpochShuffleSampler`: the training order, one NumPy permutation per epoch, with grain's
`IndexSampler` generators per position, and what a training `GrainBatches` reads with it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from grain_records import SIZES, write_split

from cvbench.data.grain.dataset import EpochShuffleSampler, imagenet_grain_dataset
from cvbench.data.read.ranks import rank_seed

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic


def _keys(sampler, start, stop):
    return [sampler[i].record_key for i in range(start, stop)]


def test_each_epoch_is_the_seeds_permutation_of_all_records():
    sampler = EpochShuffleSampler(num_records=7, seed=11, num_epochs=3)
    assert len(sampler) == 21
    for epoch in range(3):
        expected = np.random.default_rng([11, epoch]).permutation(7).tolist()
        assert _keys(sampler, 7 * epoch, 7 * epoch + 7) == expected
    assert _keys(sampler, 0, 7) != _keys(sampler, 7, 14)  # reshuffled each epoch
    assert _keys(EpochShuffleSampler(num_records=7, seed=12, num_epochs=1), 0, 7) != _keys(
        sampler, 0, 7
    )
    with pytest.raises(IndexError):
        sampler[21]
    with pytest.raises(IndexError):
        sampler[-1]


def test_positions_are_pure_functions_of_the_seed_in_any_order_and_after_pickling():
    sampler = EpochShuffleSampler(num_records=5, seed=4, num_epochs=None)
    forward = _keys(sampler, 0, 15)
    fresh = EpochShuffleSampler(num_records=5, seed=4, num_epochs=None)
    assert [fresh[i].record_key for i in reversed(range(15))] == forward[::-1]  # epochs mixed
    copy = pickle.loads(pickle.dumps(sampler))  # as grain's worker processes get it
    assert copy._orders[1].size == 0 and _keys(copy, 0, 15) == forward
    assert len(sampler) > 2**62  # endless


def test_each_positions_generator_is_index_samplers():
    """The augmentation of a position is unchanged from grain's `IndexSampler` (Philox keyed
    seed + index): the same first draws at every position."""
    import grain.python as grain

    ours = EpochShuffleSampler(num_records=6, seed=9, num_epochs=2)
    theirs = grain.IndexSampler(
        num_records=6, shard_options=grain.NoSharding(), shuffle=True, num_epochs=2, seed=9
    )
    for i in range(12):
        assert ours[i].index == i
        assert ours[i].rng.random(3).tolist() == theirs[i].rng.random(3).tolist()


def test_a_training_epoch_reads_the_permutation_of_the_ranks_seed(tmp_path):
    """Labels are the record numbers (`write_split` with 7 classes labels record i with i, 0-based),
    so one batch of all 7 records shows the epoch's order: rank 0's seed is
    `rank_seed(seed, 0) % 2**32`."""
    write_split(tmp_path, "train", SIZES, num_shards=2, num_classes=7)
    ds = imagenet_grain_dataset(
        tmp_path, "train", training=True, batch_size=7, image_size=16, seed=5,
        num_shards=1, shard_index=0, repeat=True,
    )  # fmt: skip
    iterator = iter(ds)
    seed = rank_seed(5, 0) % 2**32
    for epoch in range(2):
        labels = next(iterator)[1].tolist()
        assert labels == np.random.default_rng([seed, epoch]).permutation(7).tolist()
    assert (
        repr(ds.loader._sampler)
        == f"EpochShuffleSampler(num_records=7, seed={seed}, num_epochs=None)"
    )


def test_bad_record_counts_are_refused():
    with pytest.raises(ValueError, match="num_records must be > 0, got 0"):
        EpochShuffleSampler(num_records=0, seed=1, num_epochs=1)


def test_threads_asking_across_epoch_ends_get_each_positions_record():
    # Regression (CI, stop 45): grain's read threads ask for positions at once, on both
    # sides of an epoch's end; the order was cached in two attributes, so a thread could
    # see one epoch's number beside another epoch's order, read the wrong record, and a
    # restored iterator's batch differed from the uninterrupted one's. Threads here walk
    # over 40 epochs of 3 records, each a different stride, and compare every position's
    # record with a sampler used by one thread.
    import sys
    import threading

    single = EpochShuffleSampler(num_records=3, seed=5, num_epochs=None)
    expected = _keys(single, 0, 120)
    shared = EpochShuffleSampler(num_records=3, seed=5, num_epochs=None)
    wrong = []
    start = threading.Barrier(4)

    def walk(offset: int) -> None:
        start.wait()
        for _ in range(50):
            for index in range(offset, 120, 4):
                if shared[index].record_key != expected[index]:
                    wrong.append(index)

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a race shows at once
    try:
        threads = [threading.Thread(target=walk, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
    assert wrong == []
