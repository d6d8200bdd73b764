"""imagenet_dataset over TFRecords built from the tiny raw folder: element structure, labels,
determinism, evaluation covering every record exactly once across ranks, Horovod defaults,
corrupt input in both modes, and one real Keras training step and evaluation."""

from __future__ import annotations

import math
import shutil
import types
from collections import Counter

import numpy as np
import pytest
from imagenet_testdata import NUM_VAL_RECORDS, make_raw

from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.tfrecord import imagenet_example, scan_tfrecord

SIZE = 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    raw = make_raw(root / "raw")
    build_imagenet(
        root / "raw",
        root / "out",
        train_shards=4,
        val_shards=2,
        validation_labels=root / "raw" / "val_labels.txt",
        num_workers=1,
        progress=False,
    )
    return raw, root / "out"


def _dataset(data_dir, split="validation", **kwargs):
    from cvbench.data import imagenet_dataset

    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("image_size", SIZE)
    kwargs.setdefault("training", split == "train")
    if kwargs["training"]:
        kwargs.setdefault("shuffle_buffer", 16)
    else:
        kwargs.setdefault("num_shards", 1)
        kwargs.setdefault("shard_index", 0)
    return imagenet_dataset(data_dir, split, **kwargs)


def _rows(batches):
    """(image key, label) of every weight-1 row of numpy batches; checks the padding rows."""
    rows = []
    for images, labels, weights in batches:
        for image, label, weight in zip(images, labels, weights, strict=True):
            if weight == 1.0:
                rows.append((np.round(image, 3).tobytes(), int(label)))
            else:
                assert weight == 0.0 and label == 0 and not image.any()
    return rows


def _real_rows(ds):
    return _rows(ds.as_numpy_iterator())


def test_training_batches(data, tf):
    _, out = data
    ds = _dataset(out, "train", seed=1, num_shards=1, shard_index=0)
    assert ds.element_spec[0].shape.as_list() == [4, SIZE, SIZE, 3]
    assert ds.element_spec[1].dtype == tf.int32
    for images, labels in ds.take(5):
        assert images.dtype == tf.float32
        assert float(tf.reduce_min(images)) >= -2.119 and float(tf.reduce_max(images)) <= 2.64
        assert set(labels.numpy()) <= {0, 1, 2}


def test_one_training_pass_has_every_record_with_0_based_labels(data):
    _, out = data
    # 15 records, batch 5, one pass: 3 batches, each record once. Stored labels 1..3 (five
    # records per class: 4 JPEGs + the odd one; broken.JPEG was skipped) come out as 0..2.
    ds = _dataset(out, "train", batch_size=5, repeat=False, seed=0, num_shards=1, shard_index=0)
    labels = [int(v) for _, batch in ds.as_numpy_iterator() for v in batch]
    assert sorted(labels) == [0] * 5 + [1] * 5 + [2] * 5


def test_a_seed_makes_training_deterministic(data):
    _, out = data

    def first_batches(seed):
        ds = _dataset(out, "train", seed=seed, num_shards=1, shard_index=0)
        return [(x.copy(), y.copy()) for x, y in ds.take(3).as_numpy_iterator()]

    a, b, c = first_batches(5), first_batches(5), first_batches(6)
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert any(not np.array_equal(xa, xc) for (xa, _), (xc, _) in zip(a, c, strict=True))


def test_the_fast_decode_guard_gives_the_batches_of_the_per_example_guard(data):
    # skip_corrupt=False decodes through corrupt.checked_map, skip_corrupt=True through the
    # per-example guarded_map (the pipeline of before); on records without damage a seed
    # must give the same batches, in the same order, either way.
    _, out = data

    def batches(split, **kwargs):
        ds = _dataset(out, split, **kwargs)
        return list((ds.take(3) if split == "train" else ds).as_numpy_iterator())

    for split, kwargs in (
        ("train", {"seed": 5, "num_shards": 1, "shard_index": 0}),
        ("validation", {}),
    ):
        fast, guarded = batches(split, **kwargs), batches(split, skip_corrupt=True, **kwargs)
        assert len(fast) == len(guarded) > 0
        for a, b in zip(fast, guarded, strict=True):
            for part_a, part_b in zip(a, b, strict=True):
                np.testing.assert_array_equal(part_a, part_b)


def test_bfloat16_images(data, tf):
    _, out = data
    ds = _dataset(out, "train", dtype="bfloat16", seed=0, num_shards=1, shard_index=0)
    assert ds.element_spec[0].dtype == tf.bfloat16
    ds = _dataset(out, dtype="bfloat16")
    assert ds.element_spec[0].dtype == tf.bfloat16


def test_evaluation_covers_each_record_once_and_pads_with_zero_weights(data, tf):
    raw, out = data
    ds = _dataset(out)
    # 6 records, batch 4: 2 steps; the second batch has 2 real rows and 2 padding rows.
    assert int(ds.cardinality()) == 2
    batches = list(ds.as_numpy_iterator())
    assert [w.tolist() for _, _, w in batches] == [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]
    rows = _rows(batches)
    assert sorted(label for _, label in rows) == [0, 0, 1, 1, 2, 2]
    # Round trip: each evaluation image equals the evaluation preprocessing of a raw file.
    from cvbench.data.read.preprocessing import preprocess_for_eval

    expected = Counter()
    for path in sorted((raw.root / "validation").glob("*.JPEG")):
        image = preprocess_for_eval(tf.constant(path.read_bytes()), image_size=SIZE).numpy()
        expected[np.round(image, 3).tobytes(), raw.labels[path.name] - 1] += 1
    assert Counter(rows) == expected


@pytest.mark.parametrize(("num_shards", "batch_size"), [(2, 4), (8, 1)])
def test_evaluation_split_across_ranks_covers_every_record_exactly_once(
    data, num_shards, batch_size
):
    _, out = data
    everything = Counter(_real_rows(_dataset(out, batch_size=batch_size)))
    per_rank, steps = Counter(), set()
    for rank in range(num_shards):
        ds = _dataset(out, batch_size=batch_size, num_shards=num_shards, shard_index=rank)
        batches = list(ds.as_numpy_iterator())
        per_rank.update(_rows(batches))
        steps.add(len(batches))
        assert int(ds.cardinality()) == len(batches)
    assert per_rank == everything and sum(per_rank.values()) == NUM_VAL_RECORDS
    # Every rank runs the same number of steps, ceil(ceil(6 / ranks) / batch): 2 ranks of 3
    # records in batches of 4 take 1 step; 8 ranks get floor((r + 1) * 6 / 8) - floor(r * 6 / 8)
    # = 0, 1, 1, 1, 0, 1, 1, 1 records and take 1 step each (ranks 0 and 4: padding only).
    assert steps == {math.ceil(math.ceil(NUM_VAL_RECORDS / num_shards) / batch_size)}


def test_rank_segments_split_records_across_file_boundaries():
    from cvbench.data.read.reader import Segment, rank_segments

    files = ["a", "b", "c"]
    # Records 0-4 in a, 5-6 in c (b is empty); rank r of 3 gets [r * 7 // 3, (r + 1) * 7 // 3):
    # [0, 2), [2, 4), [4, 7).
    counts = [5, 0, 2]
    assert rank_segments(files, counts, 3, 0) == [Segment("a", 0, 2)]
    assert rank_segments(files, counts, 3, 1) == [Segment("a", 2, 2)]
    assert rank_segments(files, counts, 3, 2) == [Segment("a", 4, 1), Segment("c", 0, 2)]


def test_horovod_rank_and_size_are_the_defaults(data, monkeypatch):
    from cvbench.data._distributed import rank_and_size, resolve_shards

    assert rank_and_size() == (0, 1) or "horovod.tensorflow" in __import__("sys").modules
    fake = types.SimpleNamespace(is_initialized=lambda: True, rank=lambda: 1, size=lambda: 2)
    monkeypatch.setitem(__import__("sys").modules, "horovod.tensorflow", fake)
    assert resolve_shards(None, None) == (2, 1)
    _, out = data
    from cvbench.data import imagenet_dataset

    by_default = imagenet_dataset(out, "validation", batch_size=2, image_size=SIZE, training=False)
    explicit = _dataset(out, batch_size=2, num_shards=2, shard_index=1)
    assert _real_rows(by_default) == _real_rows(explicit)
    fake.is_initialized = lambda: False
    assert resolve_shards(None, None) == (1, 0)


def test_bad_arguments_and_missing_data(data, tmp_path):
    _, out = data
    with pytest.raises(FileNotFoundError, match="data directory .* does not exist"):
        _dataset(tmp_path / "nowhere")
    with pytest.raises(
        FileNotFoundError, match=r"no TFRecord files matching 'test-\?\?\?\?\?-of-\?\?\?\?\?'"
    ) as e:
        _dataset(out, "test")
    assert "train, validation" in str(e.value)  # what is there instead
    with pytest.raises(ValueError, match="give both num_shards and shard_index"):
        _dataset(out, num_shards=2, shard_index=None)
    with pytest.raises(ValueError, match="shard_index=2"):
        _dataset(out, num_shards=2, shard_index=2)
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        _dataset(out, batch_size=0)
    with pytest.raises(ValueError, match="floating dtype"):
        _dataset(out, dtype="int32")


def _copy(out, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    return copy


def test_truncated_file_raises_naming_it_or_is_skipped_and_counted(data, tmp_path):
    from cvbench.data import CorruptRecordCounter

    copy = _copy(data[1], tmp_path)
    shard = copy / "validation-00001-of-00002"
    scan = scan_tfrecord(shard)
    shard.write_bytes(shard.read_bytes()[: scan.valid_bytes - 100])  # cut the last record
    with pytest.raises(ValueError, match=r"validation-00001-of-00002 is truncated: 2 complete"):
        _dataset(copy)
    counter = CorruptRecordCounter()
    rows = _real_rows(_dataset(copy, skip_corrupt=True, corrupt_counter=counter))
    assert len(rows) == NUM_VAL_RECORDS - 1 and counter.count == 1


def test_corrupted_record_raises_naming_the_file_or_is_skipped_and_counted(data, tmp_path, tf):
    from cvbench.data import CorruptRecordCounter

    copy = _copy(data[1], tmp_path)
    shard = copy / "validation-00000-of-00002"
    damaged = bytearray(shard.read_bytes())
    damaged[100] ^= 0xFF  # inside the first record's data: its CRC no longer matches
    shard.write_bytes(bytes(damaged))
    with pytest.raises(tf.errors.InvalidArgumentError, match="corrupted TFRecord data in .*00000"):
        list(_dataset(copy).as_numpy_iterator())
    counter = CorruptRecordCounter()
    rows = _real_rows(_dataset(copy, skip_corrupt=True, corrupt_counter=counter))
    # TensorFlow's reader stops at the damaged first record; the reader reads on after it:
    # that record alone is lost, the shard's 2 others are read (6 records - 1).
    assert len(rows) == 5 and counter.count == 1


def _write_split(path, images):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for i, (name, data) in enumerate(images):
            writer.write(
                imagenet_example(
                    encoded=data,
                    height=40,
                    width=56,
                    label=1 + i % 3,
                    synset="s",
                    text="t",
                    filename=name,
                )
            )


def test_undecodable_image_raises_naming_it_or_is_skipped_and_counted(data, tmp_path, tf):
    from cvbench.data import CorruptRecordCounter

    raw, _ = data
    good = (raw.root / "validation" / "val_0000.JPEG").read_bytes()
    bad = good[:300]  # a JPEG header and no image data
    images = [("a.JPEG", good), ("bad.JPEG", bad), ("c.JPEG", good)]
    _write_split(tmp_path / "validation-00000-of-00001", images)
    _write_split(tmp_path / "train-00000-of-00001", images * 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"undecodable image bad\.JPEG"):
        list(_dataset(tmp_path).as_numpy_iterator())
    # Records 1 and 4 are bad; seed 0's shuffle of the 6-record pass meets record 4 first.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"record 4 of .*train-00000"):
        for _ in _dataset(tmp_path, "train", seed=0, batch_size=2).take(3):
            pass
    counter = CorruptRecordCounter()
    assert len(_real_rows(_dataset(tmp_path, skip_corrupt=True, corrupt_counter=counter))) == 2
    assert counter.count == 1
    train = _dataset(tmp_path, "train", batch_size=2, skip_corrupt=True, repeat=False, seed=0)
    assert sum(len(y) for _, y in train.as_numpy_iterator()) == 4  # 6 records, 2 bad


def test_one_keras_training_step_and_weighted_evaluation(data, tf):
    import keras

    _, out = data
    model = keras.Sequential(
        [
            keras.Input((SIZE, SIZE, 3)),
            keras.layers.Conv2D(4, 3, strides=2),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3),
        ]
    )
    model.compile(
        optimizer="sgd",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["sparse_categorical_accuracy"],
    )
    history = model.fit(
        _dataset(out, "train", seed=0, num_shards=1, shard_index=0), steps_per_epoch=1, verbose=0
    )
    assert np.isfinite(history.history["loss"][0])
    eval_ds = _dataset(out)
    _, accuracy = model.evaluate(eval_ds, verbose=0)
    correct = total = 0
    for images, labels, weights in eval_ds.as_numpy_iterator():
        predicted = model.predict_on_batch(images).argmax(-1)
        correct += int(((predicted == labels) * weights).sum())
        total += int(weights.sum())
    # The padding rows (weight 0) do not count: accuracy over exactly the 6 records.
    assert total == NUM_VAL_RECORDS
    assert accuracy == pytest.approx(correct / total)


def _write_labels(path, good, labels):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for i, label in enumerate(labels):
            writer.write(
                imagenet_example(
                    encoded=good,
                    height=40,
                    width=56,
                    label=label,
                    synset="s",
                    text="t",
                    filename=f"{i}.JPEG",
                )
            )


def test_a_label_outside_num_classes_raises_naming_it_and_its_record(data, tmp_path, tf):
    # The fault: `cvbench train --num-classes 2` on 4-class records trained silently (the
    # one-hot of an out-of-range label is all zeros, so its loss was 0).
    raw, _ = data
    good = (raw.root / "validation" / "val_0000.JPEG").read_bytes()
    _write_labels(tmp_path / "validation-00000-of-00001", good, [1, 2, 3, 1])  # 0-based 0..2
    _write_labels(tmp_path / "train-00000-of-00001", good, [1, 2, 3, 1])
    expected = (
        "assertion failed: [label 2 (stored as 3) is outside [0, 2) for num_classes=2: "
        "image 2.JPEG (record 2 of {})]"
    )
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(_dataset(tmp_path, num_classes=2).as_numpy_iterator())
    assert expected.format(tmp_path / "validation-00000-of-00001") in str(e.value)
    # Training too, and skip_corrupt does not skip it (it is no damaged record).
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        ds = _dataset(
            tmp_path, "train", batch_size=2, num_classes=2, seed=0, skip_corrupt=True, repeat=False
        )
        list(ds.as_numpy_iterator())
    assert expected.format(tmp_path / "train-00000-of-00001") in str(e.value)
    # Enough classes: every record, with its 0-based label.
    labels = sorted(label for _, label in _real_rows(_dataset(tmp_path, num_classes=3)))
    assert labels == [0, 0, 1, 2]
    assert len(_real_rows(_dataset(tmp_path))) == 4  # unchecked without num_classes


@pytest.mark.parametrize("num_classes", [0, -3, 2.0, True])
def test_num_classes_must_be_a_positive_int(data, num_classes):
    _, out = data
    with pytest.raises(ValueError) as e:
        _dataset(out, num_classes=num_classes)
    assert str(e.value) == f"num_classes must be a positive int, got {num_classes!r}"
