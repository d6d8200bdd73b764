import numpy as np
import pytest

from cvbench.training.inputs import (
    ArraySource,
    FactorySource,
    IterableSource,
    batch_length,
    make_source,
    split_batch,
)

pytestmark = pytest.mark.backend_agnostic


def arrays(n=20):
    x = np.arange(n, dtype="float32").reshape(n, 1)
    return x, np.arange(n, dtype="int32")


def test_rank_batches_concatenate_to_the_single_process_batch():
    # 20 rows, 2 ranks x 3 = global batch 6 -> 3 steps; rank r takes rows [6b + 3r, 6b + 3r + 3).
    data = arrays()
    single = list(ArraySource(data, batch_size=6, seed=4).epoch(1, 0, 0))
    ranks = [
        list(ArraySource(data, batch_size=3, rank=r, size=2, seed=4).epoch(1, 0, 0)) for r in (0, 1)
    ]
    assert len(single) == 3
    for b in range(3):
        joined = np.concatenate([ranks[0][b][1], ranks[1][b][1]])
        np.testing.assert_array_equal(joined, single[b][1])
    seen = np.concatenate([batch[1] for batch in single])
    assert len(set(seen.tolist())) == 18  # no row twice; the 2 left over are dropped


def test_each_epoch_has_its_own_seeded_order_and_a_resume_continues_it():
    source = ArraySource(arrays(), batch_size=4, seed=0)
    epoch0 = [b[1] for b in source.epoch(0, 0, 0)]
    epoch1 = [b[1] for b in source.epoch(1, 0, 0)]
    assert not np.array_equal(np.concatenate(epoch0), np.concatenate(epoch1))
    resumed = [b[1] for b in ArraySource(arrays(), batch_size=4, seed=0).epoch(1, 3, 0)]
    assert len(resumed) == 2
    for a, b in zip(resumed, epoch1[3:], strict=True):
        np.testing.assert_array_equal(a, b)
    unshuffled = ArraySource(arrays(), batch_size=4, shuffle=False)
    np.testing.assert_array_equal(next(unshuffled.epoch(5, 1, 0))[1], [4, 5, 6, 7])


def test_structured_arrays_and_sample_weights():
    x = {"image": np.zeros((8, 2), "float32"), "size": np.ones((8,), "float32")}
    y = np.arange(8)
    w = np.linspace(0, 1, 8)
    batch = next(ArraySource((x, y, w), batch_size=4, shuffle=False).epoch(0, 0, 0))
    assert batch[0]["image"].shape == (4, 2)
    np.testing.assert_array_equal(batch[2], w[:4])
    assert batch_length(batch[0]) == 4


def test_persistent_iterator_across_epochs_and_resume_skips_consumed_batches():
    batches = [(np.full((2, 1), i), np.full((2,), i)) for i in range(10)]
    source = IterableSource(batches, steps_per_epoch=3)
    first = [int(b[1][0]) for _, b in zip(range(3), source.epoch(0, 0, 0), strict=False)]
    second = [int(b[1][0]) for _, b in zip(range(3), source.epoch(1, 0, 3), strict=False)]
    assert (first, second) == ([0, 1, 2], [3, 4, 5])
    resumed = IterableSource(batches, steps_per_epoch=3)
    assert int(next(resumed.epoch(1, 1, 4))[1][0]) == 4  # 4 batches consumed before


def test_without_steps_per_epoch_every_epoch_restarts_the_data():
    batches = [(np.zeros((2, 1)), np.full((2,), i)) for i in range(4)]
    source = IterableSource(batches)
    assert source.steps_per_epoch == 4
    assert [int(b[1][0]) for b in source.epoch(3, 2, 99)] == [2, 3]


def test_epoch_functions_get_the_epoch_and_skip_within_it():
    source = FactorySource(
        lambda e: [(np.zeros((1, 1)), np.array([10 * e + i])) for i in range(5)], steps_per_epoch=5
    )
    assert [int(b[1][0]) for b in source.epoch(2, 3, 0)] == [23, 24]


def test_split_batch_forms():
    assert split_batch((1, 2)) == (1, 2, None)
    assert split_batch((1, 2, 3)) == (1, 2, 3)
    assert split_batch({"x": 1}) == ({"x": 1}, None, None)
    with pytest.raises(ValueError, match="length 4"):
        split_batch((1, 2, 3, 4))


def test_bad_data_is_refused_with_a_reason():
    def one_shot():
        yield np.zeros((1, 1)), np.zeros((1,))

    common = dict(batch_size=None, steps_per_epoch=None, rank=0, size=1, shuffle=False, seed=0)
    with pytest.raises(ValueError, match="re-iterable"):
        make_source(one_shot(), **common)
    with pytest.raises(ValueError, match="training data must be"):
        make_source(42, **common)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        make_source(arrays(5), **dict(common, batch_size=4, size=2))
    with pytest.raises(ValueError, match="batch_size"):
        make_source(arrays(5), **common)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        make_source([1], **dict(common, steps_per_epoch=0))
