"""Training examples written into the rows of reused batch arrays (`dataset._Rows` over
`dataset._Slots`): an array is lent again only once nobody holds the last view of it, a
batch of one array's rows is that array (nothing stacked), and the batches are those of new
arrays."""

from __future__ import annotations

import numpy as np
import pytest
from grain_records import SIZES, write_split

from cvbench.data.grain import dataset as grain_dataset
from cvbench.data.grain.dataset import TrainMap, _Slots, imagenet_grain_dataset

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic


def test_an_array_is_lent_again_only_when_its_view_is_gone():
    slots = _Slots((2, 3), np.float32, limit=2)
    a = slots.take()
    b = slots.take()  # a is held: another array
    assert not np.shares_memory(a, b) and len(slots.buffers) == 2
    c = slots.take()  # both held, the limit reached: a plain new array, not kept
    assert not any(np.shares_memory(c, buf) for buf in slots.buffers)
    assert len(slots.buffers) == 2
    del a
    d = slots.take()  # a's array is free again
    assert np.shares_memory(d, slots.buffers[0]) and not np.shares_memory(d, b)
    assert d.shape == (2, 3) and d.dtype == np.float32
    del b
    derived = slots.take().reshape(-1)[1:]  # the view lent is gone, one derived from it not
    assert np.shares_memory(derived, slots.buffers[1])
    assert not np.shares_memory(slots.take(), slots.buffers[1])  # still held: not lent


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("slots")
    write_split(root, "train", SIZES, num_shards=2)
    return root


def _batches(data_dir, count, **kwargs):
    ds = imagenet_grain_dataset(
        data_dir, "train", training=True, batch_size=3, image_size=24, seed=2,
        num_shards=1, shard_index=0, repeat=True, **kwargs,
    )  # fmt: skip
    iterator = iter(ds)
    return ds, [next(iterator) for _ in range(count)]


def test_batches_equal_those_of_new_arrays_and_stay_intact(data_dir, monkeypatch):
    ds, batches = _batches(data_dir, 6)
    kept = [images.copy() for images, _ in batches]
    (operation,) = [op for op in ds.loader._operations if isinstance(op, TrainMap)]
    # 12 examples' slots: 4 arrays of a batch (3 rows) each
    assert operation.slots == 12 and operation.batch == 3
    assert 1 <= len(operation._outputs.buffers) <= 4
    assert all(b.shape == (3, 24, 24, 3) for b in operation._outputs.buffers)
    monkeypatch.setattr(grain_dataset, "TrainMap", lambda t, slots, batch: TrainMap(t, slots=0))
    _, fresh = _batches(data_dir, 6)
    for (images, labels), copy, (images0, labels0) in zip(batches, kept, fresh, strict=True):
        assert np.array_equal(images, copy)  # not overwritten by the batches read after it
        assert np.array_equal(images, images0) and np.array_equal(labels, labels0)


def test_an_example_is_scaled_in_its_slot(data_dir):
    ds, _ = _batches(data_dir, 1)
    (operation,) = [op for op in ds.loader._operations if isinstance(op, TrainMap)]
    source = ds.loader._data_source
    example, _ = operation.random_map(source[0], np.random.default_rng(0))
    assert any(np.shares_memory(example, buf) for buf in operation._outputs.buffers)
    assert example.dtype == np.float32 and example.shape == (24, 24, 3)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_other_dtypes_make_new_arrays(data_dir, dtype):
    ds, batches = _batches(data_dir, 2, dtype=dtype)
    (operation,) = [op for op in ds.loader._operations if isinstance(op, TrainMap)]
    assert operation._outputs is None and batches[0][0].dtype.name == dtype


def test_a_batch_is_the_array_its_examples_were_written_into(data_dir):
    """In this process (no workers) the examples of a batch are the rows of one reused array
    (`_Rows`), which is the batch: nothing is stacked. The array is lent again once nothing
    refers to the batch: a kept batch stays as it was, a dropped one's array is reused."""
    ds, _ = _batches(data_dir, 0)
    (operation,) = [op for op in ds.loader._operations if isinstance(op, TrainMap)]
    (batch,) = [op for op in ds.loader._operations if not isinstance(op, TrainMap)]
    stack = batch.batch_fn
    assert isinstance(stack, grain_dataset._BatchArrays) and stack.rows is operation
    iterator = iter(ds)
    kept = [next(iterator)[0] for _ in range(4)]  # all held: the 4 arrays kept
    buffers = operation._outputs.buffers
    assert len(buffers) == 4
    assert [np.shares_memory(k, b) for k in kept for b in buffers] == [
        i == j for i in range(4) for j in range(4)
    ]
    fresh = next(iterator)[0]  # all 4 held: a new array, not kept
    assert not any(np.shares_memory(fresh, b) for b in buffers) and len(buffers) == 4
    copies = [k.copy() for k in kept]
    address = kept[0].__array_interface__["data"][0]
    del kept[0]
    reused = next(iterator)[0]
    assert reused.__array_interface__["data"][0] == address  # the dropped batch's array
    assert all(np.array_equal(k, c) for k, c in zip(kept, copies[1:], strict=True))
    assert reused.shape == (3, 24, 24, 3) and reused.dtype == np.float32
    assert stack._slots is None  # never stacked


def test_a_batch_out_of_step_with_the_rows_is_stacked_and_the_rows_restart(data_dir, monkeypatch):
    """A row lent and never batched (an iterator abandoned mid-batch) puts the next batch
    across two arrays: it is stacked into `_BatchArrays`' own arrays, and the rows restart
    at a row 0, so the batches after it are whole arrays again. The values are those of
    new arrays either way."""
    ds, _ = _batches(data_dir, 0)
    (operation,) = [op for op in ds.loader._operations if isinstance(op, TrainMap)]
    (batch,) = [op for op in ds.loader._operations if not isinstance(op, TrainMap)]
    iterator = iter(ds)
    first = next(iterator)
    operation._outputs.take()  # a row lent out of step
    batches = [first] + [next(iterator) for _ in range(3)]
    stack = batch.batch_fn
    assert stack._slots is not None  # the batch after the stray row: stacked
    assert np.shares_memory(batches[1][0], stack._slots.buffers[0])
    for images, _ in batches[2:]:  # whole arrays of the rows again
        assert any(np.shares_memory(images, b) for b in operation._outputs.buffers)
        assert not any(np.shares_memory(images, b) for b in stack._slots.buffers)
    monkeypatch.setattr(grain_dataset, "TrainMap", lambda t, slots, batch: TrainMap(t, slots=0))
    _, plain = _batches(data_dir, 4)
    for (images, labels), (images0, labels0) in zip(batches, plain, strict=True):
        assert np.array_equal(images, images0) and np.array_equal(labels, labels0)


def test_worker_processes_batch_with_grains_own_function(data_dir):
    ds = imagenet_grain_dataset(
        data_dir, "train", training=True, batch_size=3, image_size=24, seed=2,
        num_shards=1, shard_index=0, num_workers=1,
    )  # fmt: skip
    (batch,) = [op for op in ds.loader._operations if not isinstance(op, TrainMap)]
    assert batch.batch_fn is None  # grain's, into shared memory
