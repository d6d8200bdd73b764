"""The start of each epoch on a small set (#39 item 7): `cvbench train` lost seconds before
the first step of every epoch because the training stream's shuffle buffer (10 000 records)
was filled from the *repeated* records: 24 records were read 416 times over before the first
batch. When the rank's records fit in the buffer, `train_examples` now shuffles each pass
before the repeat (a buffer of one pass), so each pass is a permutation of the records; a
larger set is shuffled after the repeat as before.

Records: 6 classes x 4 training images of 32 x 32 (24 records in 2 files, or in 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from cvbench.data import build_imagenet, imagenet_dataset
from cvbench.data.read.reader import list_split_files, train_examples
from cvbench.data.tfrecord import parse_imagenet_example
from cvbench.demo.shapes_data import write_classification_set

RECORDS = 24


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    return write_classification_set(
        root / "raw", image_size=32, train_per_class=4, val_per_class=1, seed=0
    ).path


_BUILT: dict[int, Path] = {}


def records(raw: Path, tmp_path_factory, shards: int) -> Path:
    """The records of `raw` in `shards` training shards, built once per session into a
    folder of their own (`mktemp` numbers it: a fixed name under the session's base folder
    met another test's `records1` there, whose images are damaged on purpose)."""
    if shards not in _BUILT:
        out = tmp_path_factory.mktemp(f"epoch_start_records{shards}_")
        build_imagenet(raw, out, train_shards=shards, val_shards=1, num_workers=1, progress=False)
        _BUILT[shards] = out
    return _BUILT[shards]


def decode(image_bytes, boxes, seed):  # no random augmentation: each record's own image
    image = tf.io.decode_jpeg(image_bytes, channels=3)
    return tf.cast(tf.ensure_shape(image, [32, 32, 3]), "float32")  # whole numbers: exact


def image_ids(data_dir: Path, rows: int, **read) -> list[int]:
    """The first `rows` training images of the default (repeated) stream, each as the sum of
    its pixels (distinct for the 24 images), batch 1."""
    ds = imagenet_dataset(
        data_dir, "train", batch_size=1, image_size=32, training=True, seed=0,
        train_preprocess=decode, **read,
    )  # fmt: skip
    return [int(np.sum(x)) for x, _ in ds.take(rows).as_numpy_iterator()]


@pytest.mark.parametrize("shards", [1, 2])
def test_each_pass_of_a_small_set_is_a_permutation_of_its_records(raw, tmp_path_factory, shards):
    data_dir = records(raw, tmp_path_factory, shards)
    ids = image_ids(data_dir, 3 * RECORDS)  # default buffer: 10 000 records
    whole = sorted(image_ids(data_dir, RECORDS, shuffle_buffer=1))  # file order, one pass
    assert len(set(whole)) == RECORDS
    # The buffer held one pass: passes 1, 2 and 3 each hold every record exactly once (a
    # buffer over the repeated stream mixes passes: duplicates within 24 rows, almost surely).
    for k in range(3):
        assert sorted(ids[k * RECORDS : (k + 1) * RECORDS]) == whole
    # ...in a new order each pass, and not the file order.
    passes = [ids[k * RECORDS : (k + 1) * RECORDS] for k in range(3)]
    assert passes[0] != passes[1] != passes[2]
    assert passes[0] != image_ids(data_dir, RECORDS, shuffle_buffer=1)


@pytest.mark.parametrize(("shards", "num_shards"), [(2, 2), (1, 2)])
def test_each_ranks_pass_is_a_permutation_of_its_share(raw, tmp_path_factory, shards, num_shards):
    # By file (2 files, 2 ranks) and by record (1 file, 2 ranks): 12 records a rank.
    data_dir = records(raw, tmp_path_factory, shards)
    share = RECORDS // num_shards
    for rank in range(num_shards):
        read = {"num_shards": num_shards, "shard_index": rank}
        ids = image_ids(data_dir, 2 * share, **read)
        mine = sorted(image_ids(data_dir, share, shuffle_buffer=1, **read))
        assert sorted(ids[:share]) == sorted(ids[share:]) == mine


def test_a_set_larger_than_the_buffer_is_shuffled_after_the_repeat(raw, tmp_path_factory):
    # 24 records, buffer 4: the order a buffer of 4 over the repeated stream gives, as before.
    data_dir = records(raw, tmp_path_factory, 2)
    files = list_split_files(data_dir, "train")
    common = dict(num_shards=1, shard_index=0, seed=7, repeat=True, cycle_length=10)
    common.update(skip_corrupt=False, counter=None)
    ours = train_examples(files, parse_imagenet_example, shuffle_buffer=4, **common)
    plain = train_examples(files, parse_imagenet_example, **common).shuffle(
        4, seed=7, reshuffle_each_iteration=True
    )

    def indexes(ds):
        return [(e["source"], int(e["index"])) for e in ds.take(60).as_numpy_iterator()]

    assert indexes(ours) == indexes(plain)
