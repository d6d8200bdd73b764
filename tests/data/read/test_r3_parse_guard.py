"""The tf.data readers parse each record inside the corrupt-record guard, and the guard's
message says what kind of damage it met: a record that is no `tf.train.Example` (a sound
CRC, a writer's bug), a `tf.train.Example` without the reader's features, box coordinate
lists of different lengths or not finite, or an undecodable image. Each names the file and
the record, and with `skip_corrupt=True` is skipped and counted once, as grain's parser does
(`cvbench.data.grain.dataset`: "FILE record N: not an ImageNet tf.train.Example: ...").

Before: the parse was a map of its own before the guard, so a garbage record stopped an
ImageNet or COCO run with TensorFlow's parse error (which can hold the record's raw bytes,
`'utf-8' codec can't decode byte 0xff`), also under `skip_corrupt=True`; damaged box lists
were called an "undecodable image".
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cvbench.benchmark.input_bench import tfrecord_frame
from cvbench.cli.errors import known_error
from cvbench.data.coco_schema import BBOX_YMIN, CocoImage, CocoObject, coco_example
from cvbench.data.read import coco
from cvbench.data.read.corrupt import CorruptRecordCounter
from cvbench.data.read.imagenet import imagenet_dataset
from cvbench.data.tfrecord import encode_example, imagenet_example, int64_feature

GARBAGE = b"\xff\xfe garbage"
#: A well-formed tf.train.Example without `image/encoded` or a label.
NO_FEATURES = encode_example({"other/key": int64_feature(5)})
NOT_AN_EXAMPLE = "not a tf.train.Example"
NOT_THE_READERS = "a tf.train.Example without the features this reader needs (or of other types)"
LISTS_DIFFER = "its bbox coordinate lists differ in length"
NOT_FINITE = "a bbox coordinate is not finite"


def _jpeg(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), value, np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def _edit(record: bytes, key: str, values: list[float]) -> bytes:
    example = tf.train.Example.FromString(record)
    del example.features.feature[key].float_list.value[:]
    example.features.feature[key].float_list.value.extend(values)
    return example.SerializeToString()


def _damage(record: bytes, kind: str) -> bytes:
    """`record` damaged as `kind` says (the bbox keys of ImageNet and COCO are the same)."""
    if kind == "garbage":
        return GARBAGE
    if kind == "no_features":
        return NO_FEATURES
    if kind == "lists_differ":  # two ymin values, one of each other coordinate
        return _edit(record, BBOX_YMIN, [0.0, 0.5])
    assert kind == "nan"
    return _edit(record, BBOX_YMIN, [float("nan")])


def _write(path, records: list[bytes]) -> str:
    # tfrecord_frame: the framing TFRecordWriter writes (sound CRCs around any bytes)
    path.write_bytes(b"".join(tfrecord_frame(r) for r in records))
    return str(path)


def _imagenet_files(folder, kind: str) -> dict[bool, str]:
    """Train and validation files of labels 1-4 (0-based 0-3), record 2 damaged."""
    records = [
        imagenet_example(encoded=_jpeg(40 * k), height=16, width=16, label=k, synset=f"n{k}",
                         text=f"class {k}", filename=f"{k}.JPEG", boxes=[(0.0, 0.0, 1.0, 1.0)])
        for k in range(1, 5)
    ]  # fmt: skip
    records[2] = _damage(records[2], kind)
    return {
        True: _write(folder / "train-00000-of-00001", records),
        False: _write(folder / "validation-00000-of-00001", records),
    }


def _coco_file(folder, training: bool, kind: str) -> str:
    """Images 1-4 with one whole-image box each, record 2 (image 3) damaged."""
    obj = CocoObject(1, "person", (0.0, 0.0, 1.0, 1.0), False, 1.0)
    images = [CocoImage(i, f"{i}.jpg", 16, 16, (obj,)) for i in range(1, 5)]
    records = [coco_example(image, _jpeg(40 * image.image_id)) for image in images]
    records[2] = _damage(records[2], kind)
    split = "coco_train.record" if training else "coco_val.record"
    return _write(folder / f"{split}-00000-of-00001", records)


def _imagenet(folder, training: bool, batch_size: int = 1, **kwargs) -> tf.data.Dataset:
    return imagenet_dataset(
        folder, "train" if training else "validation", training=training,
        batch_size=batch_size, image_size=16, seed=0 if training else None, **kwargs,
    )  # fmt: skip


def _coco(folder, training: bool, **kwargs) -> tf.data.Dataset:
    return coco.coco_dataset(
        folder, "train" if training else "val", training=training,
        batch_size=1, image_size=32, shuffle_buffer=1, **kwargs,
    )  # fmt: skip


def _error(ds: tf.data.Dataset, n: int) -> tf.errors.InvalidArgumentError:
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        list(ds.take(n).as_numpy_iterator())
    return caught.value


WORDS = {
    "garbage": f"damaged record (record 2 of {{path}}): {NOT_AN_EXAMPLE}",
    "no_features": f"damaged record (record 2 of {{path}}): {NOT_THE_READERS}",
    "lists_differ": f"damaged record {{name}} (record 2 of {{path}}): {LISTS_DIFFER}",
    "nan": f"damaged record {{name}} (record 2 of {{path}}): {NOT_FINITE}",
}
KINDS = list(WORDS)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_imagenet_damaged_record_is_one_line_naming_its_kind_file_and_record(
    tmp_path, training, kind
):
    path = _imagenet_files(tmp_path, kind)[training]
    error = _error(_imagenet(tmp_path, training), 4)
    # what the command prints: the kind of damage, the record and the file, the flag's hint
    line, code = known_error(error, command="train")
    what = WORDS[kind].format(name="3.JPEG", path=path)
    assert (line, code) == (
        f"cvbench train: error: {what}; pass --skip-corrupt to skip corrupt records",
        1,
    )
    assert "codec" not in str(error) and "\\xff" not in str(error)  # no raw bytes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_imagenet_damaged_record_is_skipped_and_counted_once(tmp_path, training, kind, capfd):
    path = _imagenet_files(tmp_path, kind)[training]
    counter = CorruptRecordCounter()
    ds = _imagenet(tmp_path, training, skip_corrupt=True, corrupt_counter=counter)
    # training repeats its 3 sound records: 9 batches are three passes, the damaged record
    # met three times and counted once; evaluation reads each record once
    batches = list(ds.take(9 if training else 4).as_numpy_iterator())
    labels = sorted(int(b[1][0]) for b in batches)
    if training:
        assert labels == [0, 0, 0, 1, 1, 1, 3, 3, 3]  # records 0, 1 and 3 (0-based labels)
    else:  # 3 records and one padding row (weight 0)
        assert [(int(b[1][0]), float(b[2][0])) for b in batches] == [
            (0, 1.0), (1, 1.0), (3, 1.0), (0, 0.0)
        ]  # fmt: skip
    assert counter.count == 1
    printed = capfd.readouterr().err
    what = WORDS[kind].format(name="3.JPEG", path=path)
    assert printed.count(f'cvbench: skipped corrupt input: "{what}"\n') == 1  # tf.print's quotes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_coco_damaged_record_is_named_or_skipped(tmp_path, training, kind):
    path = _coco_file(tmp_path, training, kind)
    what = WORDS[kind].format(name="3.jpg", path=path)
    # Training without a seed interleaves chunks of 32 elements (8 passes over the 4 records)
    # two at a time in any order: 8 elements hold 4 of one chunk (reaching its record 2),
    # 9 sound ones 5 of one chunk (reaching and skipping its record 2).
    n = 8 if training else 4
    error = _error(_coco(tmp_path, training), n)
    assert known_error(error, command="train")[0] == (
        f"cvbench train: error: {what}; pass --skip-corrupt to skip corrupt records"
    )
    counter = CorruptRecordCounter()
    ds = _coco(tmp_path, training, skip_corrupt=True, corrupt_counter=counter)
    batches = list(ds.take(n + 1 if training else 3).as_numpy_iterator())
    assert len(batches) == (9 if training else 3) and counter.count == 1
    if not training:  # evaluation names its images: 1, 2 and 4 (image 3 was record 2)
        assert [int(b[1]["image_id"][0]) for b in batches] == [1, 2, 4]


@pytest.mark.parametrize("batch_size", [1, 3])
def test_an_undecodable_image_keeps_its_words(tmp_path, batch_size):
    records = [
        imagenet_example(encoded=b"no image" if k == 3 else _jpeg(40 * k), height=16,
                         width=16, label=k, synset=f"n{k}", text="", filename=f"{k}.JPEG")
        for k in range(1, 5)
    ]  # fmt: skip
    path = _write(tmp_path / "validation-00000-of-00001", records)
    error = _error(_imagenet(tmp_path, False, batch_size=batch_size), 4)
    assert known_error(error, command="eval")[0] == (
        f"cvbench eval: error: undecodable image 3.JPEG (record 2 of {path}); "
        "pass --skip-corrupt to skip corrupt records"
    )


@pytest.mark.parametrize("skip_corrupt", [False, True])
def test_a_label_outside_the_classes_is_still_an_error_after_the_guard(tmp_path, skip_corrupt):
    # the label check runs on the parsed example after the guard: never skipped
    records = [
        imagenet_example(encoded=_jpeg(40 * k), height=16, width=16, label=k, synset=f"n{k}",
                         text="", filename=f"{k}.JPEG")
        for k in range(1, 5)
    ]  # fmt: skip
    path = _write(tmp_path / "validation-00000-of-00001", records)
    ds = _imagenet(tmp_path, False, num_classes=3, skip_corrupt=skip_corrupt)
    error = _error(ds, 4)
    assert known_error(error, command="eval")[0] == (
        "cvbench eval: error: label 3 (stored as 4) is outside [0, 3) for --num-classes 3: "
        f"image 4.JPEG (record 3 of {path})"
    )


@pytest.mark.parametrize(
    ("lengths", "differ"),
    [((0, 0, 0, 0), False), ((3, 3, 3, 3), False), ((2, 1, 1, 1), True), ((1, 1, 1, 0), True)],
)
def test_box_lists_differ_is_the_one_rule_of_the_tf_free_readers(lengths, differ):
    # numpy arrays, as the COCO ground truth rebuilt from records holds them
    from cvbench.data.tfrecord import box_lists_differ

    assert box_lists_differ(np.zeros(n, np.float32) for n in lengths) is differ


def test_check_labels_is_label_check_over_a_dataset():
    """`check_labels` (public, kept beside `label_check`, which the readers now apply after
    their guard): a label inside the classes passes, one outside raises naming it."""
    from cvbench.data.read.pipeline import check_labels

    def example(label):
        return tf.data.Dataset.from_tensors(
            {"label": tf.constant(label, tf.int32), "filename": tf.constant("a.JPEG"),
             "source": tf.constant("/d/train-00000-of-00001"), "index": tf.constant(2, tf.int64)}
        )  # fmt: skip

    assert [int(e["label"]) for e in check_labels(example(2), 3)] == [2]
    # label 3, stored 1-based as 4, is outside [0, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"label 3 \(stored as 4\) is outside"):
        list(check_labels(example(3), 3))
