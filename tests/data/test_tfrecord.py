"""The pure-Python Example encoder and TFRecord framing reader, checked against TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from cvbench.data.tfrecord import (
    bytes_feature,
    encode_example,
    float_feature,
    imagenet_example,
    int64_feature,
    iter_tfrecord,
    parse_imagenet_example,
    scan_tfrecord,
)


def test_encode_example_equals_tensorflow_proto():
    import tensorflow as tf

    ours = encode_example(
        {
            "b": bytes_feature([b"\x00\xff", "text"]),
            "i": int64_feature([-1, 0, 2**40]),  # negative int64: 10-byte varint
            "f": float_feature([0.5, -2.25]),
            "empty_f": float_feature([]),
            "empty_i": int64_feature([]),
        }
    )
    feature = tf.train.Feature
    expected = tf.train.Example(
        features=tf.train.Features(
            feature={
                "b": feature(bytes_list=tf.train.BytesList(value=[b"\x00\xff", b"text"])),
                "i": feature(int64_list=tf.train.Int64List(value=[-1, 0, 2**40])),
                "f": feature(float_list=tf.train.FloatList(value=[0.5, -2.25])),
                "empty_f": feature(float_list=tf.train.FloatList(value=[])),
                "empty_i": feature(int64_list=tf.train.Int64List(value=[])),
            }
        )
    )
    assert tf.train.Example.FromString(ours) == expected


def test_imagenet_example_parses_with_the_standard_keys():
    serialized = imagenet_example(
        encoded=b"\xff\xd8jpeg",
        height=3,
        width=4,
        label=7,
        synset="n01440764",
        text="tench, Tinca tinca",
        filename="n01440764_1.JPEG",
        boxes=[(0.1, 0.2, 0.3, 0.4), (0.5, 0.6, 0.7, 0.8)],  # xmin, ymin, xmax, ymax
    )
    import tensorflow as tf

    features = tf.train.Example.FromString(serialized).features.feature
    assert features["image/class/label"].int64_list.value == [7]
    assert features["image/colorspace"].bytes_list.value == [b"RGB"]
    assert features["image/channels"].int64_list.value == [3]
    assert features["image/format"].bytes_list.value == [b"JPEG"]
    assert features["image/class/synset"].bytes_list.value == [b"n01440764"]
    assert features["image/class/text"].bytes_list.value == [b"tench, Tinca tinca"]
    assert features["image/object/bbox/label"].int64_list.value == [7, 7]
    parsed = parse_imagenet_example(tf.constant(serialized))
    assert int(parsed["label"]) == 6  # stored 1-based, read 0-based
    assert parsed["filename"].numpy() == b"n01440764_1.JPEG"
    # Boxes come back as [ymin, xmin, ymax, xmax] rows.
    expected_boxes = [[0.2, 0.1, 0.4, 0.3], [0.6, 0.5, 0.8, 0.7]]
    np.testing.assert_allclose(parsed["boxes"].numpy(), expected_boxes, rtol=1e-6)


def test_imagenet_example_without_boxes_parses_to_zero_boxes():
    import tensorflow as tf

    serialized = imagenet_example(
        encoded=b"x", height=1, width=1, label=1, synset="a", text="a", filename="a.jpg"
    )
    assert parse_imagenet_example(tf.constant(serialized))["boxes"].shape == (0, 4)


def test_label_zero_is_reserved():
    with pytest.raises(ValueError, match="label must be >= 1"):
        imagenet_example(
            encoded=b"x", height=1, width=1, label=0, synset="a", text="a", filename="a"
        )


def _write_records(path, records):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for r in records:
            writer.write(r)


def test_scan_counts_records_and_finds_a_truncated_tail(tmp_path):
    records = [b"a" * 10, b"", b"b" * 1000]
    path = tmp_path / "f"
    _write_records(path, records)
    # Each record takes 8 (length) + 4 (length CRC) + len + 4 (data CRC) bytes.
    sizes = [16 + len(r) for r in records]
    assert path.stat().st_size == sum(sizes)
    scan = scan_tfrecord(path)
    assert (scan.num_records, scan.truncated, scan.valid_bytes) == (3, False, sum(sizes))
    assert list(iter_tfrecord(path)) == records

    data = path.read_bytes()
    (tmp_path / "cut").write_bytes(data[: sizes[0] + sizes[1] + 100])
    cut = scan_tfrecord(tmp_path / "cut")
    assert (cut.num_records, cut.truncated, cut.valid_bytes) == (2, True, sizes[0] + sizes[1])
    assert "truncated: 2 complete records, then 100 bytes" in cut.describe()
    assert list(iter_tfrecord(tmp_path / "cut")) == records[:2]
    (tmp_path / "header_only").write_bytes(data[:5])
    assert scan_tfrecord(tmp_path / "header_only").num_records == 0


def test_encode_example_exact_bytes_of_int64_minus_one_and_zero():
    # Protobuf writes a negative int64 as its 64-bit two's complement, 2**64 - 1 for -1: ten
    # varint bytes, nine 0xff (7 low bits set plus the continuation bit) and the last bit 0x01.
    minus_one = bytes([0xFF] * 9 + [0x01])
    # Inside out, each level a length-delimited field (tag = field << 3 | 2, then the length):
    int64_list = bytes([0x0A, 10]) + minus_one  # Int64List.value (field 1, packed), 12 bytes
    feature = bytes([0x1A, 12]) + int64_list  # Feature.int64_list (field 3), 14 bytes
    entry = bytes([0x0A, 1]) + b"k" + bytes([0x12, 14]) + feature  # map key 1, value 2: 19
    features = bytes([0x0A, 19]) + entry  # Features.feature map entry (field 1): 21 bytes
    assert encode_example({"k": int64_feature(-1)}) == bytes([0x0A, 21]) + features
    # Zero is the one-byte varint 0x00 (not a 10-byte two's complement): Int64List 3 bytes,
    # Feature 5, map entry 3 + 2 + 5 = 10, Features 12, Example 14.
    zero = bytes([0x0A, 10, 0x0A, 1]) + b"k" + bytes([0x12, 5, 0x1A, 3, 0x0A, 1, 0])
    assert encode_example({"k": int64_feature(0)}) == bytes([0x0A, 12]) + zero


def test_encode_example_rejects_a_value_that_is_not_a_feature():
    with pytest.raises(ValueError, match="feature 'k' must be a Feature, got int"):
        encode_example({"k": 3})


def test_box_rows_must_all_have_four_values():
    # A 5-value row next to a 4-value row: the columns are uneven, whatever zip would cut.
    kwargs = {"encoded": b"x", "height": 1, "width": 1, "label": 1, "synset": "a", "text": "a"}
    with pytest.raises(ValueError):
        imagenet_example(**kwargs, filename="a", boxes=[(0.1, 0.2, 0.3, 0.4, 0.5), (0, 0, 1, 1)])
    with pytest.raises(ValueError, match="boxes must be"):
        imagenet_example(**kwargs, filename="a", boxes=[(0.1, 0.2, 0.3)])


def test_feature_spec_defaults_for_a_record_with_only_image_and_label():
    import tensorflow as tf

    from cvbench.data.tfrecord import imagenet_feature_spec

    # Records of other builders may carry only the two required keys: the optional ones read
    # as "" and 0, and the boxes as empty lists.
    serialized = encode_example(
        {"image/encoded": bytes_feature(b"jpeg"), "image/class/label": int64_feature(5)}
    )
    parsed = tf.io.parse_single_example(serialized, imagenet_feature_spec())
    assert int(parsed["image/class/label"]) == 5
    assert [int(parsed[f"image/{k}"]) for k in ("height", "width")] == [0, 0]
    keys = ("class/synset", "class/text", "filename")
    assert [parsed[f"image/{k}"].numpy() for k in keys] == [b"", b"", b""]
    assert parsed["image/object/bbox/xmin"].dense_shape.numpy().tolist() == [0]


def test_a_record_whose_data_crc_is_cut_off_is_not_complete(tmp_path):
    records = [b"a" * 10, b"bcd"]
    path = tmp_path / "f"
    _write_records(path, records)
    # Record 0 takes 16 + 10 = 26 bytes, record 1 16 + 3 = 19; cut the last 2 bytes of record
    # 1's data CRC: its data is all there, but the record is not complete.
    (tmp_path / "cut").write_bytes(path.read_bytes()[: 26 + 19 - 2])
    scan = scan_tfrecord(tmp_path / "cut")
    assert (scan.num_records, scan.truncated, scan.valid_bytes, scan.file_bytes) == (
        1,
        True,
        26,
        43,
    )
    assert list(iter_tfrecord(tmp_path / "cut")) == records[:1]
