"""The reader skeleton (`cvbench.data.read.pipeline.read_batches`): a source of examples
(`ExampleSource`: `RecordExamples`, `TfdsExamples`, or any object with `train` / `eval`)
and a `BatchTransform` -> a rank's batches, with the shard, seed, shuffle, corrupt policy and
evaluation padding the same for every source."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf

from cvbench.data.read.corrupt import CorruptRecordCounter
from cvbench.data.read.pipeline import BatchTransform, RankRead, read_batches
from cvbench.data.read.ranks import eval_steps_of, rank_range, rank_seed
from cvbench.data.read.reader import RecordExamples
from cvbench.data.read.spec import ReadSpec


def _examples(values: list[float]) -> tf.data.Dataset:
    n = len(values)
    return tf.data.Dataset.from_tensor_slices(
        {
            "x": tf.constant(values, tf.float32),
            "filename": tf.constant([f"{i}.jpg" for i in range(n)]),
            "source": tf.constant(["mem"] * n),
            "index": tf.range(n, dtype=tf.int64),
        }
    )


@dataclass(frozen=True)
class ListExamples:
    """A new source (values in memory, as a plain image folder would be) plugged in with
    nothing but `train` and `eval`: what a rank reads is `ranks.rank_range`'s."""

    values: list[float]
    shuffles: bool = False

    def _mine(self, rank: RankRead) -> list[float]:
        lo, hi = rank_range(len(self.values), rank.num_shards, rank.shard_index)
        return self.values[lo:hi]

    def train(self, rank: RankRead) -> tf.data.Dataset:
        ds = _examples(self._mine(rank))
        return ds.repeat() if rank.spec.repeat else ds

    def eval(self, rank: RankRead) -> tuple[tf.data.Dataset, int]:
        steps = eval_steps_of(len(self.values), rank.num_shards, rank.spec.batch_size)
        return _examples(self._mine(rank)), steps


def _doubled(e: dict) -> tf.Tensor:
    check = tf.debugging.assert_non_negative(e["x"])
    with tf.control_dependencies([check]):
        return 2.0 * e["x"]


EVAL = BatchTransform(
    _doubled,
    lambda y, e: (y, tf.constant(1.0)),
    tf.TensorSpec([], tf.float32),
    pad=(tf.constant(0.0), tf.constant(0.0)),
)
TRAIN = BatchTransform(_doubled, lambda y, e: y, tf.TensorSpec([], tf.float32))


def _rows(ds) -> list:
    batches = ds.as_numpy_iterator()
    return [(float(y), float(w)) for ys, ws in batches for y, w in zip(ys, ws, strict=True)]


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_a_new_source_evaluates_every_value_once_across_ranks(batch_size):
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    source = ListExamples(values)
    rows, counts = [], set()
    for rank in range(2):
        spec = ReadSpec(batch_size=batch_size, training=False, num_shards=2, shard_index=rank)
        ds = read_batches(source, spec, EVAL)
        counts.add(int(ds.cardinality()))
        rows += _rows(ds)
    # Ranks read 2 and 3 values; every rank runs ceil(3 / batch_size) steps.
    assert counts == {-(-3 // batch_size)}
    real = sorted(y for y, w in rows if w == 1.0)
    assert real == [2 * v for v in values]  # each value once, doubled
    assert all(y == 0.0 for y, w in rows if w == 0.0)  # padding: the pad element
    assert len(rows) == 2 * -(-3 // batch_size) * batch_size


def test_training_shuffles_with_the_rank_seed_unless_the_source_does():
    values = [float(v) for v in range(8)]
    spec = ReadSpec(
        batch_size=8, training=True, num_shards=1, shard_index=0, seed=3, shuffle_buffer=8
    )
    once = dict(repeat=False)

    def first(source) -> list[float]:
        ds = read_batches(source, dataclasses.replace(spec, **once), TRAIN)
        return next(ds.as_numpy_iterator()).tolist()

    shuffled = first(ListExamples(values))
    # The skeleton shuffles with spec.shuffle_buffer and the rank's seed: a permutation,
    # the same for the same seed.
    assert sorted(shuffled) == [2 * v for v in values] and shuffled != sorted(shuffled)
    assert shuffled == first(ListExamples(values))
    # A source that shuffles itself is not shuffled again: its order comes through.
    assert first(ListExamples(values, shuffles=True)) == [2 * v for v in values]


def test_the_rank_read_resolves_shards_seed_and_counter():
    counter = CorruptRecordCounter()
    spec = ReadSpec(
        batch_size=1, training=True, num_shards=3, shard_index=2, seed=5,
        skip_corrupt=True, corrupt_counter=counter,
    )  # fmt: skip
    rank = RankRead.of(spec)
    assert (rank.num_shards, rank.shard_index, rank.seed) == (3, 2, rank_seed(5, 2))
    assert rank.counter is counter and rank.skip_corrupt
    # Without skip_corrupt the counter is not used (corrupt input raises).
    plain = RankRead.of(ReadSpec(batch_size=1, training=True, corrupt_counter=counter))
    assert plain.counter is None and (plain.num_shards, plain.shard_index) == (1, 0)


def test_the_corrupt_policy_applies_to_any_source():
    source = ListExamples([1.0, -1.0, 3.0])
    spec = ReadSpec(batch_size=1, training=False, num_shards=1, shard_index=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"undecodable image 1\.jpg"):
        list(read_batches(source, spec, EVAL))
    counter = CorruptRecordCounter()
    skipping = dataclasses.replace(spec, skip_corrupt=True, corrupt_counter=counter)
    # Value 1 is skipped and counted: 2 real rows, then a padding row fills the 3 steps.
    assert _rows(read_batches(source, skipping, EVAL)) == [(2.0, 1.0), (6.0, 1.0), (0.0, 0.0)]
    assert counter.count == 1


def _write(path, values) -> str:
    with tf.io.TFRecordWriter(str(path)) as w:
        for v in values:
            w.write(str(v).encode())
    return str(path)


def _parse(record: tf.Tensor) -> dict:
    return {"x": tf.strings.to_number(record), "filename": tf.constant("")}


@pytest.mark.parametrize("num_shards", [1, 2, 3])
def test_record_examples_plug_in_exactly_once_across_ranks(tmp_path, num_shards):
    files = [_write(tmp_path / "a", [1, 2, 3]), _write(tmp_path / "b", [4, 5])]
    source = RecordExamples(files, _parse, cycle_length=2)
    rows = []
    for rank in range(num_shards):
        spec = ReadSpec(batch_size=2, training=False, num_shards=num_shards, shard_index=rank)
        rows += _rows(read_batches(source, spec, EVAL))
    assert sorted(y for y, w in rows if w == 1.0) == [2.0, 4.0, 6.0, 8.0, 10.0]
    # Every rank runs ceil(ceil(5 / R) / 2) steps of 2 rows.
    assert len(rows) == num_shards * 2 * math.ceil(math.ceil(5 / num_shards) / 2)


def test_record_examples_refuse_a_bad_cycle_length():
    with pytest.raises(ValueError, match="cycle_length must be >= 1, got 0"):
        RecordExamples([], _parse, cycle_length=0)


def test_record_examples_train_is_seeded_and_deterministic(tmp_path):
    files = [_write(tmp_path / f"f{i}", range(4 * i, 4 * i + 4)) for i in range(3)]
    source = RecordExamples(files, _parse, cycle_length=2)
    spec = ReadSpec(
        batch_size=4, training=True, num_shards=1, shard_index=0, seed=1, repeat=False,
        shuffle_buffer=4,
    )  # fmt: skip

    def epoch() -> list[float]:
        return np.concatenate(list(read_batches(source, spec, TRAIN).as_numpy_iterator())).tolist()

    first = epoch()
    assert sorted(first) == [2.0 * v for v in range(12)] and first == epoch()


def test_the_batchers_take_a_batch_transform_as_its_parts():
    from cvbench.data.read.pipeline import eval_batches, train_batches

    common = {"skip_corrupt": False, "counter": None, "batch_size": 2}
    whole = eval_batches(_examples([1.0, 2.0, 3.0]), EVAL, steps=2, **common)
    parts = eval_batches(
        _examples([1.0, 2.0, 3.0]),
        EVAL.transform,
        to_element=EVAL.to_element,
        pad=EVAL.pad,
        output_spec=EVAL.output_spec,
        steps=2,
        **common,
    )
    # 3 values doubled, then one padding row: [2, 4], [6, 0]; weights 1, 1, 1, 0.
    assert _rows(whole) == _rows(parts) == [(2.0, 1.0), (4.0, 1.0), (6.0, 1.0), (0.0, 0.0)]
    train = train_batches(_examples([1.0, 2.0, 3.0]), TRAIN, seed=0, shuffle_buffer=1, **common)
    assert [b.tolist() for b in train.as_numpy_iterator()] == [[2.0, 4.0]]  # remainder dropped
