"""A record whose box coordinate lists differ in length is a damaged record: every TFRecord
reader (ImageNet and COCO, training and evaluation) names it with its file and record, or
with `skip_corrupt=True` skips and counts it, as an undecodable image; grain's parser refuses
it the same way (`tests/data/grain/test_grain_records.py`).

Before (review of 2026-12-05): the parse stacked the four lists with `tf.stack`, which ran
before the corrupt-record policy: `--skip-corrupt` training ended with `Shapes of all inputs
must match: values[0].shape = [2] != values[1].shape = [1] [[{{node stack}}]]` as a
traceback, naming neither file nor record.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cvbench.data.coco_schema import BBOX_YMIN, CocoImage, CocoObject, coco_example
from cvbench.data.read import coco
from cvbench.data.read.corrupt import CorruptRecordCounter
from cvbench.data.read.imagenet import imagenet_dataset
from cvbench.data.tfrecord import imagenet_example


def _jpeg(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), value, np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def _damaged(record: bytes, key: str) -> bytes:
    """`record` with two values in its box coordinate list `key`, one in the three others."""
    example = tf.train.Example.FromString(record)
    example.features.feature[key].float_list.value.append(0.5)
    return example.SerializeToString()


def _imagenet_records(folder) -> str:
    """Records of labels 1-4 (0-based 0-3), record 2 damaged."""
    box = [(0.0, 0.0, 1.0, 1.0)]
    records = [
        imagenet_example(encoded=_jpeg(40 * k), height=16, width=16, label=k, synset=f"n{k}",
                         text=f"class {k}", filename=f"{k}.JPEG", boxes=box)
        for k in range(1, 5)
    ]  # fmt: skip
    records[2] = _damaged(records[2], "image/object/bbox/ymin")
    path = folder / "train-00000-of-00001"
    with tf.io.TFRecordWriter(str(path)) as w:
        for record in records:
            w.write(record)
    (folder / "validation-00000-of-00001").write_bytes(path.read_bytes())
    return str(path)


def _coco_records(folder, split) -> str:
    """Images 1-4 with one whole-image box each, record 2 (image 3) damaged."""
    obj = CocoObject(1, "person", (0.0, 0.0, 1.0, 1.0), False, 1.0)
    images = [CocoImage(i, f"{i}.jpg", 16, 16, (obj,)) for i in range(1, 5)]
    records = [coco_example(image, _jpeg(40 * image.image_id)) for image in images]
    records[2] = _damaged(records[2], BBOX_YMIN)
    path = folder / f"{split}-00000-of-00001"
    with tf.io.TFRecordWriter(str(path)) as w:
        for record in records:
            w.write(record)
    return str(path)


def _imagenet(folder, training, **kwargs):
    return imagenet_dataset(
        folder, "train" if training else "validation", training=training, batch_size=1,
        image_size=16, seed=0 if training else None, **kwargs,
    )  # fmt: skip


def _coco(folder, training, **kwargs):
    return coco.coco_dataset(
        folder, "train" if training else "val", training=training,
        batch_size=1, image_size=32, shuffle_buffer=1, **kwargs,
    )  # fmt: skip


def _first_pass(ds, n):
    return list(ds.take(n).as_numpy_iterator())


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_imagenet_records_with_damaged_boxes_are_skipped_and_counted(tmp_path, training):
    _imagenet_records(tmp_path)
    counter = CorruptRecordCounter()
    batches = _first_pass(
        _imagenet(tmp_path, training, skip_corrupt=True, corrupt_counter=counter), 3
    )
    labels = sorted(int(b[1][0]) for b in batches)
    assert labels == [0, 1, 3]  # 0-based labels of records 0, 1 and 3: record 2 left out
    assert int(counter.count) == 1


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_imagenet_records_with_damaged_boxes_are_an_error_naming_the_record(tmp_path, training):
    path = _imagenet_records(tmp_path)
    if not training:
        path = path.replace("train-", "validation-")
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"record 2 of {path}"):
        _first_pass(_imagenet(tmp_path, training, skip_corrupt=False), 4)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_coco_records_with_damaged_boxes_are_skipped_or_named(tmp_path, training):
    path = _coco_records(tmp_path, "coco_train.record" if training else "coco_val.record")
    counter = CorruptRecordCounter()
    # Training without a seed interleaves chunks of 32 elements (8 passes over the records)
    # two at a time in any order: 9 sound elements hold 5 of one chunk (past its record 2),
    # 8 elements 4 of one chunk (reaching its record 2); evaluation is one pass in order.
    skipping = _coco(tmp_path, training, skip_corrupt=True, corrupt_counter=counter)
    batches = _first_pass(skipping, 9 if training else 3)
    assert len(batches) == (9 if training else 3) and int(counter.count) == 1
    if not training:  # evaluation names its images: 1, 2 and 4 (image 3 was record 2)
        assert sorted(int(b[1]["image_id"][0]) for b in batches) == [1, 2, 4]
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"record 2 of {path}"):
        _first_pass(_coco(tmp_path, training, skip_corrupt=False), 8 if training else 4)


def test_eval_pipeline_takes_examples_without_boxes():
    # Regression (review of stop 47): the box check of evaluation asked every example for
    # "boxes", which a caller's own examples to the public eval_pipeline need not have.
    from cvbench.data.read.pipeline import eval_pipeline

    example = {
        "encoded": tf.constant(_jpeg(0)), "label": tf.constant(1, tf.int32),
        "filename": tf.constant("a.jpg"), "source": tf.constant("mine"),
        "index": tf.constant(0, tf.int64),
    }  # fmt: skip
    ds = eval_pipeline(tf.data.Dataset.from_tensors(example), batch_size=1, image_size=8,
                       dtype=tf.float32, steps=1, skip_corrupt=False, counter=None)  # fmt: skip
    images, labels, weights = next(iter(ds))
    assert images.shape == (1, 8, 8, 3) and labels.numpy().tolist() == [1]
    assert weights.numpy().tolist() == [1.0]


def test_coco_ground_truth_from_records_names_a_record_with_damaged_boxes(tmp_path):
    # Regression (review of stop 47): evaluation without the annotation file rebuilds the
    # ground truth from the records; np.stack of the four lists raised "all input arrays
    # must have the same shape", naming neither file nor record.
    from cvbench.data.coco_schema import groundtruth_from_records
    from cvbench.utils.errors import BadFileError

    path = _coco_records(tmp_path, "coco_val.record")
    with pytest.raises(BadFileError, match=f"{path}: record 2: the record's box coordinate"):
        groundtruth_from_records([path])
