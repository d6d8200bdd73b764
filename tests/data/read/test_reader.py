"""The reader skeleton (`cvbench.data.read.reader`) and the generic batching
(`cvbench.data.read.pipeline`) on tiny TFRecord files whose records are plain strings:
which rank reads which record, the step count, padding to a fixed number of batches and
the decode guard on dict elements."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from cvbench.data.read.corrupt import CorruptRecordCounter
from cvbench.data.read.pipeline import eval_batches, train_batches
from cvbench.data.read.reader import eval_examples, eval_steps, rank_seed, train_examples


def _write(path, values) -> str:
    with tf.io.TFRecordWriter(str(path)) as w:
        for v in values:
            w.write(v.encode())
    return str(path)


def _parse(record):
    return {"value": record}


def _values(ds) -> list[str]:
    return [e["value"].decode() for e in ds.as_numpy_iterator()]


def _read(**kwargs):
    return {"cycle_length": 4, "skip_corrupt": False, "counter": None, **kwargs}


def _train(files, rank, num_shards, seed):
    return train_examples(
        files, _parse, **_read(num_shards=num_shards, shard_index=rank, seed=seed, repeat=False)
    )


def test_training_with_fewer_files_than_ranks_splits_the_records(tmp_path):
    files = [_write(tmp_path / "a", ["a0", "a1", "a2", "a3", "a4"])]
    # One file, two ranks: both read it and keep every second record, rank r from record r.
    per_rank = [_values(_train(files, r, 2, seed=None)) for r in (0, 1)]
    assert per_rank == [["a0", "a2", "a4"], ["a1", "a3"]]


def test_training_with_enough_files_deals_out_whole_files_in_a_seeded_order(tmp_path):
    files = [_write(tmp_path / f"f{i}", [f"f{i}r0", f"f{i}r1"]) for i in range(4)]

    def rank(r, seed):
        return _values(_train(files, r, 2, seed))

    # Rank 1 of 2 reads files 1 and 3 (files[1::2]), all their records, nothing else.
    assert sorted(rank(1, 7)) == ["f1r0", "f1r1", "f3r0", "f3r1"]
    assert sorted(rank(0, 7)) == ["f0r0", "f0r1", "f2r0", "f2r1"]
    assert rank(1, 7) == rank(1, 7)  # the seed fixes the file order
    # The examples carry the file and the record's position in it.
    first = next(iter(_train(files[:1], 0, 1, seed=0)))
    assert first["source"].numpy().decode() == files[0] and int(first["index"]) == 0


def test_evaluation_reads_contiguous_ranges_and_counts_the_steps(tmp_path):
    files = [_write(tmp_path / "a", ["a0", "a1", "a2"]), _write(tmp_path / "b", ["b0", "b1"])]
    # 5 records, 2 ranks: rank r reads records [r * 5 // 2, (r + 1) * 5 // 2) = [0, 2), [2, 5),
    # across the file boundary. Steps: ceil(ceil(5 / 2) / 2) = ceil(3 / 2) = 2 on both ranks.
    out = [
        eval_examples(files, _parse, **_read(num_shards=2, shard_index=r, batch_size=2))
        for r in (0, 1)
    ]
    assert [_values(ds) for ds, _ in out] == [["a0", "a1"], ["a2", "b0", "b1"]]
    assert [steps for _, steps in out] == [2, 2]
    assert eval_steps(3, 2) == 2 and eval_steps(4, 2) == 2 and eval_steps(0, 2) == 0


def test_rank_seed_differs_per_rank_and_keeps_none():
    assert rank_seed(None, 3) is None
    assert rank_seed(1, 0) == rank_seed(1, 0) != rank_seed(1, 1)


def _examples(values):
    return tf.data.Dataset.from_tensor_slices(
        {
            "x": tf.constant(values, tf.float32),
            "filename": tf.constant([f"{i}.jpg" for i in range(len(values))]),
            "source": tf.constant(["file"] * len(values)),
            "index": tf.range(len(values), dtype=tf.int64),
        }
    )


def _doubled(e):
    # Fails (as an undecodable image would) on a negative value.
    check = tf.debugging.assert_non_negative(e["x"])
    with tf.control_dependencies([check]):
        return {"y": 2.0 * e["x"]}


def test_eval_batches_pad_dict_elements_to_exactly_the_steps():
    ds = eval_batches(
        _examples([1.0, 2.0, 3.0]),
        _doubled,
        to_element=lambda out, e: {"y": out["y"], "valid": tf.constant(True)},
        pad={"y": tf.constant(0.0), "valid": tf.constant(False)},
        batch_size=2,
        steps=3,
        skip_corrupt=False,
        counter=None,
    )
    # 3 real rows (y = 2x, in order) then 3 padding rows: 3 full batches of 2.
    assert int(ds.cardinality()) == 3
    batches = list(ds.as_numpy_iterator())
    assert [b["y"].tolist() for b in batches] == [[2.0, 4.0], [6.0, 0.0], [0.0, 0.0]]
    assert [b["valid"].tolist() for b in batches] == [[True, True], [True, False], [False, False]]


def test_the_guard_names_a_failing_example_or_skips_and_counts_it():
    values = [1.0, -1.0, 3.0]
    kwargs = {
        "to_element": lambda out, e: out["y"],
        "pad": tf.constant(0.0),
        "batch_size": 1,
        "steps": 3,
    }
    ds = eval_batches(_examples(values), _doubled, skip_corrupt=False, counter=None, **kwargs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"undecodable image 1\.jpg"):
        list(ds)
    counter = CorruptRecordCounter()
    ds = eval_batches(_examples(values), _doubled, skip_corrupt=True, counter=counter, **kwargs)
    # Example 1 is dropped: 2 real rows and one padding row fill the 3 steps.
    assert np.concatenate(list(ds.as_numpy_iterator())).tolist() == [2.0, 6.0, 0.0]
    assert counter.count == 1


def test_train_batches_give_each_example_a_seed_and_drop_the_remainder():
    ds = train_batches(
        _examples([1.0, 2.0, 3.0]),
        lambda e: e["seed"],
        to_element=lambda seed, e: (seed, e["x"]),
        output_spec=tf.TensorSpec([2], tf.int64),
        batch_size=2,
        seed=0,
        shuffle_buffer=1,
        skip_corrupt=False,
        counter=None,
    )
    # 3 examples in batches of 2: one batch, the third example dropped; no shuffling (buffer
    # 1), so the order is the input's; each example got its own seed.
    batches = list(ds.as_numpy_iterator())
    assert len(batches) == 1
    seeds, xs = batches[0]
    assert xs.tolist() == [1.0, 2.0] and seeds.shape == (2, 2)
    assert seeds[0].tolist() != seeds[1].tolist()
