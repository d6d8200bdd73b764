"""`GrainBatches.state_at(start)`: the grain iterator state of a batch position, equal to
the one a live iterator reports there (0, 1 and 2 workers), and `iterate_from(start)`, which
`cvbench.training.inputs` uses to resume at a checkpoint's position without reading the
batches before it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from grain_records import SIZES, write_split

from cvbench.data.grain.dataset import imagenet_grain_dataset
from cvbench.training.inputs import FactorySource, IterableSource, iterate_from

pytestmark = pytest.mark.backend_agnostic


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain_state")
    write_split(root, "train", [(40, 56), (64, 48), (33, 90)] * 4 + SIZES[:1], num_shards=2)
    return root  # 13 records


def _train(data_dir, workers):
    return imagenet_grain_dataset(
        data_dir, "train", batch_size=2, training=True, image_size=16, seed=5,
        num_workers=workers,
    )  # fmt: skip


def _equal(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("workers", [0, 2])
def test_the_state_of_a_position_is_the_live_iterators_and_resumes_there(data_dir, workers):
    # 13 records, batch 2: 6 batches an epoch; positions up to 9 cross into the second
    # epoch (the training sampler repeats), and with 2 workers odd and even positions end
    # on different workers (the round-robin `state_at` reproduces).
    data = _train(data_dir, workers)
    live = iter(data)
    reference = []
    for start in range(10):
        assert data.state_at(start) == live.get_state(), start
        reference.append(next(live))
    for start in (0, 7) if workers else (0, 1, 4, 7, 9):  # (worker processes start slowly)
        assert _equal(next(data.iterate_from(start)), reference[start]), start
        assert _equal(next(iterate_from(data, start)), reference[start]), start


def test_a_resume_in_the_trainers_sources_reads_no_skipped_batch(data_dir):
    data = _train(data_dir, 0)
    reference = list(itertools.islice(iter(data), 6))

    class Counting:
        """`data`, counting the batches its iterators yield."""

        yielded = 0

        def __iter__(self):
            for batch in data:
                Counting.yielded += 1
                yield batch

        def iterate_from(self, start):
            for batch in data.iterate_from(start):
                Counting.yielded += 1
                yield batch

    for source in (
        FactorySource(lambda epoch: Counting(), steps_per_epoch=6),
        IterableSource(Counting(), steps_per_epoch=6),
    ):
        Counting.yielded = 0
        first = next(source.epoch(0, 4, 4))
        assert _equal(first[:2], reference[4]) and Counting.yielded == 1


def test_a_bad_position_is_refused(data_dir):
    data = _train(data_dir, 0)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="start must be an int >= 0"):
            data.state_at(bad)
