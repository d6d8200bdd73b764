"""The TFRecord / `tf.train.Example` *format*: record framing, Example encoding, the ImageNet keys.

This module knows what the bytes of a file and of a record are; reading a split's files as a
`tf.data` stream (listing, rank split, lost records) is `cvbench.data.read.reader`, and the COCO
record layout is `cvbench.data.coco_schema`. Builders and readers share it, in two halves:

* Writing side, pure Python (no TensorFlow import): `encode_example` serializes a
  `tf.train.Example` from `bytes_feature` / `int64_feature` / `float_feature` values, and
  `imagenet_example` fixes the ImageNet feature keys. Builder worker processes use these, so a
  64-core build does not load 64 copies of TensorFlow.
* Reading side: `scan_tfrecord` walks a file's record framing (counts records, finds a
  truncated tail) without TensorFlow; `parse_imagenet_example` parses a serialized record with
  TensorFlow (imported when called).

TFRecord framing, per record: uint64 little-endian length, uint32 masked CRC32C of the length,
the data, uint32 masked CRC32C of the data. `scan_tfrecord` reads only the headers: it checks
a length's CRC where the walk goes wrong (a length that runs past the end of the file is a
damaged length, not a truncated file, when its CRC fails); the data CRCs are the TensorFlow
reader's (it reports a mismatch as a corrupted record).

ImageNet feature keys (the layout of the TensorFlow ImageNet builder that every TF ImageNet
loader reads): `image/encoded` (JPEG), `image/height`, `image/width`, `image/colorspace`
('RGB'), `image/channels` (3), `image/class/label` (1..N, 0 reserved for background; readers
subtract 1), `image/class/synset`, `image/class/text`, `image/format` ('JPEG'),
`image/filename`, `image/object/bbox/{xmin,ymin,xmax,ymax}` (normalized floats, any number) and
`image/object/bbox/label` (one int64 per box).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

# Feature kinds: the field numbers of the `kind` oneof in tensorflow/core/example/feature.proto.
_BYTES, _FLOAT, _INT64 = 1, 2, 3

BBOX_KEYS = (
    "image/object/bbox/xmin",
    "image/object/bbox/ymin",
    "image/object/bbox/xmax",
    "image/object/bbox/ymax",
)


@dataclass(frozen=True)
class Feature:
    """One typed feature value list of a `tf.train.Example`; build it with the helpers below."""

    kind: int
    values: tuple


def bytes_feature(value: bytes | str | Sequence[bytes | str]) -> Feature:
    """A BytesList feature; `str` values are UTF-8 encoded."""
    values = [value] if isinstance(value, bytes | str) else list(value)
    return Feature(
        _BYTES, tuple(v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values)
    )


def int64_feature(value: int | Sequence[int]) -> Feature:
    """An Int64List feature."""
    values = [value] if isinstance(value, int) else list(value)
    return Feature(_INT64, tuple(int(v) for v in values))


def float_feature(value: float | Sequence[float]) -> Feature:
    """A FloatList feature (stored as float32)."""
    values = [value] if isinstance(value, int | float) else list(value)
    return Feature(_FLOAT, tuple(float(v) for v in values))


def _varint(n: int) -> bytes:
    if n < 0:  # int64 two's complement, as protobuf encodes negative int64 values
        n += 1 << 64
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _encode_feature(feature: Feature) -> bytes:
    if feature.kind == _BYTES:
        body = b"".join(_length_delimited(1, v) for v in feature.values)
    elif feature.kind == _FLOAT:
        packed = struct.pack(f"<{len(feature.values)}f", *feature.values)
        body = _length_delimited(1, packed) if feature.values else b""
    elif feature.kind == _INT64:
        packed = b"".join(_varint(v) for v in feature.values)
        body = _length_delimited(1, packed) if feature.values else b""
    else:
        raise ValueError(f"unknown feature kind {feature.kind!r}")
    return _length_delimited(feature.kind, body)


def encode_example(features: Mapping[str, Feature]) -> bytes:
    """Serializes a `tf.train.Example` without TensorFlow.

    The bytes equal (as a protobuf message) what
    `tf.train.Example(features=tf.train.Features(feature=...)).SerializeToString()` gives.

    Args:
        features: feature key -> `Feature` from `bytes_feature`, `int64_feature` or
            `float_feature`.

    Returns:
        The serialized Example.
    """
    entries = []
    for key, feature in features.items():
        if not isinstance(feature, Feature):
            raise ValueError(f"feature {key!r} must be a Feature, got {type(feature).__name__}")
        entry = _length_delimited(1, key.encode("utf-8")) + _length_delimited(
            2, _encode_feature(feature)
        )
        entries.append(_length_delimited(1, entry))
    return _length_delimited(1, b"".join(entries))


def imagenet_example(
    *,
    encoded: bytes,
    height: int,
    width: int,
    label: int,
    synset: str,
    text: str,
    filename: str,
    boxes: Sequence[Sequence[float]] = (),
) -> bytes:
    """Serializes one ImageNet record in the standard TF ImageNet layout.

    Args:
        encoded: RGB JPEG bytes.
        height: image height in pixels.
        width: image width in pixels.
        label: class label, 1..N (0 is reserved for background).
        synset: class id, e.g. 'n01440764' (the folder name for custom data).
        text: human-readable class name.
        filename: the source file's base name.
        boxes: normalized boxes `[xmin, ymin, xmax, ymax]`, any number (the order the
            ImageNet bounding-box CSV uses); each gets `label` as its box label.

    Returns:
        The serialized `tf.train.Example`.
    """
    if label < 1:
        raise ValueError(f"label must be >= 1 (0 is reserved for background), got {label}")
    columns = list(zip(*boxes, strict=True)) if boxes else [(), (), (), ()]
    if len(columns) != 4:
        raise ValueError(f"boxes must be [xmin, ymin, xmax, ymax] rows, got {boxes!r}")
    features = {
        "image/height": int64_feature(height),
        "image/width": int64_feature(width),
        "image/colorspace": bytes_feature("RGB"),
        "image/channels": int64_feature(3),
        "image/class/label": int64_feature(label),
        "image/class/synset": bytes_feature(synset),
        "image/class/text": bytes_feature(text),
        "image/format": bytes_feature("JPEG"),
        "image/filename": bytes_feature(filename),
        "image/encoded": bytes_feature(encoded),
        "image/object/bbox/label": int64_feature([label] * len(boxes)),
    }
    for key, column in zip(BBOX_KEYS, columns, strict=True):
        features[key] = float_feature(column)
    return encode_example(features)


def imagenet_feature_spec() -> dict[str, Any]:
    """The `tf.io.parse_single_example` spec for ImageNet records (bbox keys variable-length)."""
    import tensorflow as tf

    spec: dict[str, Any] = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/synset": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/class/text": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/filename": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/height": tf.io.FixedLenFeature([], tf.int64, default_value=0),
        "image/width": tf.io.FixedLenFeature([], tf.int64, default_value=0),
    }
    for key in BBOX_KEYS:
        spec[key] = tf.io.VarLenFeature(tf.float32)
    return spec


def parse_imagenet_example(serialized: Any) -> dict[str, Any]:
    """Parses one serialized ImageNet record (a scalar string tensor).

    Returns:
        A dict with `encoded` (string), `label` (int32, 0-based: the stored label minus 1),
        `filename` (string) and `boxes` (float32 [num_boxes, 4] as `[ymin, xmin, ymax, xmax]`,
        the order `tf.image.sample_distorted_bounding_box` takes).
    """
    import tensorflow as tf

    parsed = tf.io.parse_single_example(serialized, imagenet_feature_spec())
    xmin, ymin, xmax, ymax = (tf.sparse.to_dense(parsed[key]) for key in BBOX_KEYS)
    return {
        "encoded": parsed["image/encoded"],
        "label": tf.cast(parsed["image/class/label"], tf.int32) - 1,
        "filename": parsed["image/filename"],
        "boxes": stack_boxes(ymin, xmin, ymax, xmax),
    }


#: What `checked_boxes` says of a record whose boxes it refuses.
DAMAGED_BOXES = "the record's box coordinate lists differ in length, or hold a value not finite"
#: The readers' words for a record whose four box coordinate lists differ in length.
BOX_LISTS_DIFFER = "its bbox coordinate lists differ in length"
#: ... and for one whose lists agree but hold a value not finite (NaN, infinity).
BOX_NOT_FINITE = "a bbox coordinate is not finite"


def box_lists_differ(columns: Iterable[Sized]) -> bool:
    """Whether a record's box coordinate lists (`ymin`, `xmin`, `ymax`, `xmax`, in any order:
    lists, arrays) differ in length: a damaged record (or a writer's bug), which no reader
    can turn into boxes. The one rule of the TF-free readers (grain's parser, the COCO
    ground truth rebuilt from records); `record_box_lists_differ` is the tf.data path's.

    Example:
        >>> box_lists_differ([[0.1], [0.2], [0.5], [0.7]]), box_lists_differ([[], [], [], []])
        (False, False)
        >>> box_lists_differ([[0.1, 0.3], [0.2], [0.5], [0.7]])
        True
    """
    return len({len(c) for c in columns}) > 1


def stack_boxes(ymin: Any, xmin: Any, ymax: Any, xmax: Any) -> Any:
    """A record's four box coordinate lists as float32 [n, 4] `[ymin, xmin, ymax, xmax]`.

    Lists of different lengths (a damaged record, or a writer's bug) give one box of NaN
    instead of failing here, so that the parse itself succeeds: the readers' transforms
    refuse such boxes (`checked_boxes`) inside the corrupt-record guard, which tells this
    damage from a record that does not parse (`record_box_lists_differ`, on the failure
    path only) and names the record, or skips and counts it.
    """
    import tensorflow as tf

    columns = [ymin, xmin, ymax, xmax]
    sizes = tf.stack([tf.size(c) for c in columns])
    return tf.cond(
        tf.reduce_all(tf.equal(sizes, sizes[0])),
        lambda: tf.reshape(tf.stack(columns, axis=-1), [-1, 4]),
        lambda: tf.fill([1, 4], float("nan")),
    )


def checked_boxes(boxes: Any) -> Any:
    """`boxes`, after checking that every coordinate is finite (`stack_boxes` marks lists of
    different lengths with NaN): an `InvalidArgumentError` saying `DAMAGED_BOXES` otherwise,
    which a reader's corrupt-record guard turns into an error naming the record, or a skip."""
    import tensorflow as tf

    return tf.debugging.assert_all_finite(boxes, DAMAGED_BOXES)


def record_box_lists_differ(serialized: Any) -> Any:
    """Whether the box coordinate lists (`BBOX_KEYS`, the same keys in ImageNet and COCO
    records) of a serialized `tf.train.Example` differ in length: a bool scalar tensor.

    It parses the record again, so a reader asks it only of a record it refused (to say
    why); it fails at run time, as the parse does, on a record that is no Example or holds
    those keys as another type.
    """
    import tensorflow as tf

    spec = {key: tf.io.VarLenFeature(tf.float32) for key in BBOX_KEYS}
    parsed = tf.io.parse_single_example(serialized, spec)
    sizes = tf.stack([tf.size(parsed[key]) for key in BBOX_KEYS])
    return tf.reduce_any(tf.not_equal(sizes, sizes[0]))


@dataclass(frozen=True)
class TFRecordScan:
    """What `scan_tfrecord` found in one file.

    Attributes:
        path: the file.
        num_records: complete records from the start of the file.
        truncated: True when bytes follow the last complete record that do not form a whole
            record (an interrupted copy or write), or cannot be read (`crc_mismatch`).
        valid_bytes: the offset where the complete records end.
        file_bytes: the file size.
        crc_mismatch: True when the record at `valid_bytes` has a damaged length (its CRC
            does not match): the records from there on cannot be found.
    """

    path: str
    num_records: int
    truncated: bool
    valid_bytes: int
    file_bytes: int
    crc_mismatch: bool = False

    def describe(self) -> str:
        """One line saying what is wrong with a truncated or damaged file.

        Example:
            >>> scan = TFRecordScan("t-0", 3, True, 120, 200, crc_mismatch=True)
            >>> print(scan.describe().replace("; ", ";\\n"))
            TFRecord file t-0 is damaged: CRC mismatch in the length of record 3 at byte 120;
            3 complete records before it, 80 bytes from there cannot be read
        """
        if self.crc_mismatch:
            return (
                f"TFRecord file {self.path} is damaged: CRC mismatch in the length of record "
                f"{self.num_records} at byte {self.valid_bytes}; {self.num_records} complete "
                f"records before it, {self.file_bytes - self.valid_bytes} bytes from there "
                "cannot be read"
            )
        return (
            f"TFRecord file {self.path} is truncated: {self.num_records} complete records, then "
            f"{self.file_bytes - self.valid_bytes} bytes of an incomplete record at byte "
            f"{self.valid_bytes}"
        )


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """The masked CRC32C (Castagnoli) TFRecord framing stores for `data` (pure Python: meant
    for the 8 bytes of a length, not for record data).

    Example:
        >>> hex(masked_crc32c(b"123456789"))  # CRC32C check value 0xe3069283, masked
        '0xc78ab0e5'
    """
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _first_damaged_length(f, size: int) -> tuple[int, int] | None:
    """`(record, offset)` of the first record whose length fails its CRC, walking the headers
    of the open file `f` from its start; None when every length up to the end checks."""
    count = offset = 0
    while offset + 12 <= size:
        f.seek(offset)
        header = f.read(12)
        if len(header) < 12:
            return None
        if masked_crc32c(header[:8]) != struct.unpack("<I", header[8:])[0]:
            return count, offset
        (length,) = struct.unpack("<Q", header[:8])
        offset += 12 + length + 4
        count += 1
    return None


def scan_tfrecord(path: str | os.PathLike) -> TFRecordScan:
    """Counts the complete records of a TFRecord file by walking the length headers.

    Reads 12 bytes per record (not the data), so it is fast even for large files. When the
    walk does not end at the end of the file, the lengths' CRCs are checked: a damaged length
    (`crc_mismatch`) is told from a cut-off file.

    Raises:
        FileNotFoundError: if `path` does not exist.
        BadFileError: `path` is not a regular file (a FIFO, a device).
    """
    from cvbench.utils.files import open_input

    path = os.fspath(path)
    count = offset = 0
    with open_input(path, what="TFRecord file") as f:
        size = os.fstat(f.fileno()).st_size
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                break
            (length,) = struct.unpack("<Q", header[:8])
            end = offset + 12 + length + 4
            if end > size:
                break
            f.seek(end)
            offset = end
            count += 1
        damaged = _first_damaged_length(f, size) if offset != size else None
    if damaged is not None:
        count, offset = damaged
    return TFRecordScan(path, count, offset != size, offset, size, crc_mismatch=damaged is not None)


def iter_tfrecord(path: str | os.PathLike) -> Iterator[bytes]:
    """Yields the data of each complete record of a TFRecord file (no CRC check)."""
    with open(path, "rb") as f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            data = f.read(length)
            if len(data) < length or len(f.read(4)) < 4:
                return
            yield data
