"""`cvbench.data.grain.records`: random access into TFRecord shards and the TF-free Example
parser, checked against TensorFlow's reader and parser on the same files."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from grain_records import write_split

from cvbench.data.dali_index import index_path, write_index
from cvbench.data.grain.records import (
    TFRecordSource,
    parse_example,
    record_offsets,
    scan_offsets,
)
from cvbench.data.read.splits import list_split_files
from cvbench.data.tfrecord import (
    _length_delimited,
    imagenet_example,
    iter_tfrecord,
    parse_imagenet_example,
)
from cvbench.utils.errors import BadFileError

SIZES = [(20, 30), (31, 17), (16, 16), (25, 40), (18, 22)]

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain_records")
    return write_split(root, "train", SIZES, num_shards=2)


def test_the_source_reads_every_record_of_every_shard_in_order(shards):
    source = TFRecordSource(shards)
    expected = [r for path in shards for r in iter_tfrecord(path)]
    assert len(source) == 5 and source.counts == [3, 2]
    assert [source[i] for i in range(len(source))] == expected
    assert source[4] == expected[4] and source[0] == expected[0]  # random access, any order
    assert source.locate(3) == (str(shards[1]), 0)  # record 3 is the second file's first
    with pytest.raises(IndexError, match="record 5 out of range: 5 records"):
        source[5]


def test_the_offsets_come_from_a_fresh_dali_index_else_from_a_scan(shards, tmp_path):
    path = shards[0]
    scanned = scan_offsets(path)
    # 3 records, each (offset, data length + 16), back to back to the end of the file
    assert scanned.shape == (3, 2) and scanned[0, 0] == 0
    assert scanned[-1].sum() == os.path.getsize(path)
    write_index(path, tmp_path / "idx" / (path.name + ".idx"))
    assert np.array_equal(record_offsets(path, index_dir=tmp_path / "idx"), scanned)
    # a stale index (says 1 record) is not trusted: the file is scanned
    index_path(path, tmp_path / "stale").parent.mkdir()
    index_path(path, tmp_path / "stale").write_text("0 10\n")
    assert np.array_equal(record_offsets(path, index_dir=tmp_path / "stale"), scanned)


def test_a_truncated_shard_is_refused_naming_the_file(shards, tmp_path):
    cut = tmp_path / "train-00000-of-00001"
    data = shards[0].read_bytes()
    cut.write_bytes(data[: len(data) - 5])
    with pytest.raises(BadFileError, match=f"TFRecord file {cut} is truncated: 2 complete rec"):
        TFRecordSource([cut])


def test_a_folder_named_like_a_shard_is_no_shard(tmp_path):
    (tmp_path / "train-00000-of-00001").mkdir()
    with pytest.raises(FileNotFoundError, match="no TFRecord files matching"):
        list_split_files(tmp_path, "train")


def test_an_incomplete_shard_set_is_refused_as_every_reader_refuses_it(tmp_path):
    # grain lists a split itself (no TensorFlow): a missing shard trained on less before;
    # shards 0 and 2 of 3 are there, so shard 1 is named missing. Another split's set, or
    # files not named -NNNNN-of-NNNNN (a --file-pattern), are not this split's.
    for name in ("train-00000-of-00003", "train-00002-of-00003", "validation-00000-of-00002"):
        (tmp_path / name).write_bytes(b"x")  # not 0 bytes: a truncated copy
    with pytest.raises(BadFileError, match=r"the train split in .* is incomplete: 1 of its 3 "):
        list_split_files(tmp_path, "train")
    (tmp_path / "train-00001-of-00003").write_bytes(b"x")
    assert len(list_split_files(tmp_path, "train")) == 3
    with pytest.raises(BadFileError, match=r"\(validation-00001-of-00002\)"):
        list_split_files(tmp_path, "validation")
    (tmp_path / "mine.rec").write_bytes(b"")
    assert len(list_split_files(tmp_path, "train", "*.rec")) == 1
    # a file pattern is the caller's choice of files: one shard of an incomplete set too
    chosen = list_split_files(tmp_path, "validation", "validation-00000-of-00002")
    assert [os.path.basename(p) for p in chosen] == ["validation-00000-of-00002"]


def test_parse_example_gives_what_tensorflow_parses(shards, tf):
    boxes = [(0.1, 0.2, 0.5, 0.75), (0.0, 0.25, 1.0, 0.5)]  # [xmin, ymin, xmax, ymax]
    records = [*iter_tfrecord(shards[0])]
    records.append(
        imagenet_example(
            encoded=b"\xff\xd8\xffjpeg",
            height=1,
            width=1,
            label=1000,
            synset="n1",
            text="t",
            filename="b.JPEG",
            boxes=boxes,
        )
    )
    for record in records:
        ours = parse_example(record)
        theirs = parse_imagenet_example(tf.constant(record))
        assert ours["encoded"] == theirs["encoded"].numpy()
        assert ours["label"] == int(theirs["label"])
        assert ours["filename"] == theirs["filename"].numpy().decode()
        assert np.array_equal(ours["boxes"], theirs["boxes"].numpy())
    assert parse_example(records[-1])["label"] == 999  # stored 1..1000 -> 0..999


def test_parse_example_reads_unpacked_numbers_too():
    # Protobuf parsers must accept unpacked repeated numbers (TensorFlow writes them packed):
    # the Example written by hand, int64 as `08 03` (field 1, varint 3), floats as `0d` +
    # 4 bytes (field 1, fixed32).
    def entry(key: str, feature: bytes) -> bytes:
        body = _length_delimited(1, key.encode()) + _length_delimited(2, feature)
        return _length_delimited(1, body)

    def floats(value: float) -> bytes:
        return _length_delimited(2, b"\x0d" + struct.pack("<f", value))

    features = [
        entry("image/encoded", _length_delimited(1, _length_delimited(1, b"x"))),
        entry("image/class/label", _length_delimited(3, b"\x08\x03")),
        entry("image/object/bbox/xmin", floats(0.5)),
        *(entry(f"image/object/bbox/{k}", floats(0.25)) for k in ("ymin", "xmax", "ymax")),
    ]
    record = _length_delimited(1, b"".join(features))
    parsed = parse_example(record)
    assert parsed["encoded"] == b"x" and parsed["label"] == 2  # stored 3 -> 2
    assert parsed["boxes"].tolist() == [[0.25, 0.5, 0.25, 0.25]]  # [ymin, xmin, ymax, xmax]


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (b"\x0a\x05abc", "field 1 runs past the end of its message"),
        (b"\x0b", "unsupported protobuf wire type 3"),
        (b"\x08\xff", "truncated or overlong varint"),
        (b"", "no single image/encoded bytes value"),
    ],
    ids=["field-past-end", "wire-type-3", "overlong-varint", "empty"],
)
def test_a_malformed_record_says_what_is_wrong(record, reason):
    with pytest.raises(ValueError, match=reason):
        parse_example(record)


@pytest.mark.parametrize(
    ("key", "feature", "reason"),
    [
        # image/encoded's bytes_list (kind 1) holding a varint of 2e9 (field 1, wire type 0):
        # bytes(2e9) made 2 GB of zeros from 6 damaged bytes, or a MemoryError past the policy
        (
            "image/encoded",
            _length_delimited(1, b"\x08\x80\xa8\xd6\xb9\x07"),
            "wire type 0 in a list of kind 1",
        ),
        # the label's int64_list (kind 3) holding a fixed32 (`0d` + 4 bytes): a TypeError before
        (
            "image/class/label",
            _length_delimited(3, b"\x0d\x00\x00\x00\x00"),
            "wire type 5 in a list of kind 3",
        ),
        # a box coordinate's float_list (kind 2) packed in 5 bytes (`0a 05` + 5 bytes): a
        # struct.error before, which --skip-corrupt's policy (ValueError) did not catch
        (
            "image/object/bbox/xmin",
            _length_delimited(2, b"\x0a\x05\x00\x00\x80\x3f\x00"),
            "a float list of 5 bytes",
        ),
    ],
    ids=["bytes-as-varint", "int64-as-fixed32", "float-packed-in-5-bytes"],
)
def test_a_value_of_the_wrong_wire_type_is_a_value_error(key, feature, reason):
    # Regression (review of 2026-12-05): a ValueError is what the corrupt-record policy skips.
    entry = _length_delimited(1, _length_delimited(1, key.encode()) + _length_delimited(2, feature))
    with pytest.raises(ValueError, match=reason):
        parse_example(_length_delimited(1, entry))
