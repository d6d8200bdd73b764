"""Random access into TFRecord shards and `tf.train.Example` parsing, without TensorFlow.

Two halves of the grain input path's reading side (`cvbench.data.grain.dataset` wires them):

* `TFRecordSource`: a grain `RandomAccessDataSource` over the records of a list of TFRecord
  files: `len(source)` records, `source[i]` the serialized record `i` (numbered across the
  files in order). The record offsets come from the DALI index files (`cvbench dali-index`,
  `cvbench.data.dali_index`) when they are there and fresh, else from one walk over each
  file's length headers (12 bytes read per record). Records are read with `os.pread` on a
  descriptor opened per process (`cvbench.utils.files.open_input`: regular files only), so
  the source pickles into grain's worker processes. CRCs are not checked (as
  `tfrecord.scan_tfrecord`; a damaged record fails in `parse_example` or in decoding).
* `parse_example`: the ImageNet keys of a serialized `tf.train.Example` (protobuf wire
  format read by hand): `encoded` bytes, `label` 0-based (the stored 1..N minus 1),
  `filename` and `boxes` (float32 [n, 4] `[ymin, xmin, ymax, xmax]`), the fields
  `tfrecord.parse_imagenet_example` gives with TensorFlow. It is the *decoder* of Model
  Garden's `InputReader(decoder, parser)` shape; the augmentation is separate
  (`cvbench.data.grain.augment`).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import hashlib
import itertools
import os
import shutil
import struct
import sys
import tempfile
import weakref
from collections.abc import Sequence

import numpy as np

from cvbench.data.dali_index import read_index
from cvbench.data.tfrecord import BOX_LISTS_DIFFER, box_lists_differ
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import open_input

try:  # grain is optional (the `jax` extra); the parser below works without it
    from grain.python import RandomAccessDataSource as _Base
except ImportError:  # pragma: no cover - exercised only without grain
    _Base = object


def scan_offsets(path: str | os.PathLike) -> np.ndarray:
    """`(offset, size)` of each framed record of a TFRecord file, int64 [n, 2], from its
    length headers (`size` = data length + 16, as in the DALI index).

    Raises:
        BadFileError: not a regular file, or a truncated last record (named).
    """
    table, truncated = _scan(path)
    if truncated:
        raise BadFileError(f"{truncated}; copy or build it again")
    return table


def _scan(path: str | os.PathLike) -> tuple[np.ndarray, str | None]:
    """The complete records' `(offset, size)` and, for a truncated file, what is cut off
    (`TFRecordScan.describe`'s words), else None."""
    entries = []
    with open_input(path, what="TFRecord file") as f:
        size = os.fstat(f.fileno()).st_size
        offset = 0
        while offset < size:
            header = os.pread(f.fileno(), 8, offset)
            end = offset + 16 + struct.unpack("<Q", header)[0] if len(header) == 8 else size + 1
            if end > size:
                table = np.asarray(entries, np.int64).reshape(-1, 2)
                return table, (
                    f"TFRecord file {os.fspath(path)} is truncated: {len(entries)} complete "
                    f"records, then {size - offset} bytes of an incomplete record at byte "
                    f"{offset}"
                )
            entries.append((offset, end - offset))
            offset = end
    return np.asarray(entries, np.int64).reshape(-1, 2), None


def record_offsets(
    path: str | os.PathLike,
    *,
    index_dir: str | os.PathLike | None = None,
    policy: CorruptPolicy | None = None,
) -> np.ndarray:
    """The records of `path` as `scan_offsets` gives them: from its DALI index when that
    exists and ends where the file ends, else by scanning the file (a missing or stale index
    is no error: the scan is the truth).

    With a skipping `policy` a truncated file gives its complete records, and its cut-off
    tail is reported (and counted as one record) once; otherwise it raises `BadFileError`.
    """
    if policy is None or not policy.skip:
        table, truncated = complete_records(path, index_dir=index_dir)
        if truncated:
            raise BadFileError(f"{truncated}; copy or build it again")
        return table
    table, truncated = complete_records(path, index_dir=index_dir)
    if truncated:
        policy.corrupt(truncated)
    return table


def complete_records(
    path: str | os.PathLike, *, index_dir: str | os.PathLike | None = None
) -> tuple[np.ndarray, str | None]:
    """`(table, truncated)`: the complete records' `(offset, size)` (from the DALI index when
    it is fresh, else a scan) and, for a truncated file, what is cut off, else None; nothing
    is reported (`record_offsets` applies the policy)."""
    try:
        return np.asarray(read_index(path, index_dir), np.int64).reshape(-1, 2), None
    except (FileNotFoundError, ValueError):
        return _scan(path)


class TFRecordSource(_Base):
    """The records of `files`, numbered across the files in order, by random access.

    Args:
        files: TFRecord files (e.g. `cvbench.data.read.splits.list_split_files`).
        index_dir: where the DALI index files are (`dali_index.index_path`); None: the `idx`
            folder beside the files.
        policy: what a truncated file does (`record_offsets`); None: it raises.

    Raises:
        BadFileError: a file is not a regular file, or ends inside a record (named) unless
            `policy` skips.
    """

    def __init__(
        self,
        files: Sequence[str | os.PathLike],
        *,
        index_dir: str | os.PathLike | None = None,
        policy: CorruptPolicy | None = None,
    ) -> None:
        self.files = [os.fspath(p) for p in files]
        tables = [record_offsets(p, index_dir=index_dir, policy=policy) for p in self.files]
        self.counts = [len(t) for t in tables]
        self._starts = [0, *itertools.accumulate(self.counts)]
        self._table = np.concatenate([*tables, np.zeros((0, 2), np.int64)])
        self._fds: dict[int, int] = {}

    def __len__(self) -> int:
        return self._starts[-1]

    def locate(self, index: int) -> tuple[str, int]:
        """`(file, position in the file)` of record `index` (for messages)."""
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} out of range: {len(self)} records")
        k = self._file_of(index)
        return self.files[k], index - self._starts[k]

    def __getitem__(self, index: int) -> bytes:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} out of range: {len(self)} records")
        k = self._file_of(index)
        path = self.files[k]
        offset, size = (int(v) for v in self._table[index])
        data = os.pread(self._descriptor(k), size - 16, offset + 12)
        if len(data) != size - 16:
            raise BadFileError(f"TFRecord file {path} ended inside record at byte {offset}")
        return data

    def _descriptor(self, k: int) -> int:
        """This process's descriptor of file `k`, opened on its first read. grain's read
        threads may open one at once: the first stored is kept and the others closed
        (`dict.setdefault` stores or returns in one step), so no descriptor is dropped
        open."""
        fd = self._fds.get(k)
        if fd is None:
            with open_input(self.files[k], what="TFRecord file") as f:
                opened = os.dup(f.fileno())
            fd = self._fds.setdefault(k, opened)
            if fd != opened:  # another thread stored its own first
                os.close(opened)
        return fd

    def _file_of(self, index: int) -> int:
        return bisect.bisect_right(self._starts, index) - 1

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_fds"] = {}  # descriptors do not cross processes: each opens its own
        return state

    def __del__(self, _close=os.close, _suppress=contextlib.suppress) -> None:
        # Bound at definition: at interpreter exit the module's globals (os, contextlib) may
        # already be gone when the last source is collected.
        for fd in getattr(self, "_fds", {}).values():
            with _suppress(OSError):
                _close(fd)

    def __repr__(self) -> str:
        return f"TFRecordSource({len(self.files)} files, {len(self)} records)"


# ---- corrupt input: raise, or skip and count once ---------------------------------------------

SKIP_HINT = "; pass skip_corrupt=True to skip corrupt records"  # corrupt.SKIP_HINT's words
SKIPPED = "cvbench: skipped corrupt input: "  # what the tf.data path prints before each


class SkippedRecords:
    """Counts the records skipped as corrupt, once each, across processes.

    The tf.data path's `CorruptRecordCounter` keeps its count in a TensorFlow variable of one
    process; grain transforms records in worker processes. Here each damaged record, told by
    its key (the file and record; by default the whole message, which names them: a key
    keeps a decoder's varying words, such as an object's address, from counting a record
    twice), is a marker file created with
    `O_CREAT | O_EXCL` in a private temporary folder: the process that creates it prints the
    message and the record counts, every later meeting (another epoch, another worker) finds
    the file there. `count` is the number of markers. The object pickles into grain's worker
    processes (the folder's path travels); the folder is removed when the object made in the
    first process is collected.

    Example:
        >>> skipped = SkippedRecords()
        >>> skipped.report("f record 3: undecodable image"), skipped.count
        (True, 1)
        >>> skipped.report("f record 3: undecodable image"), skipped.count  # met again
        (False, 1)
    """

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="cvbench-skipped-")
        self._remove = weakref.finalize(self, shutil.rmtree, self.folder, True)

    def __getstate__(self) -> dict:
        return {"folder": self.folder}  # a copy in another process does not remove the folder

    def report(self, message: str, *, key: str | None = None) -> bool:
        """Prints `message` (with `SKIPPED` before it) to stderr and counts its record, told
        by `key` (None: `message`), the first time any process reports it; returns whether
        this was the first time."""
        name = hashlib.sha256((message if key is None else key).encode("utf-8")).hexdigest()
        marker = os.path.join(self.folder, name)
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        print(SKIPPED + message, file=sys.stderr)
        return True

    @property
    def count(self) -> int:
        """Records skipped so far (exact once the pipeline has run to its end: records in
        flight are counted when they are met)."""
        try:
            return len(os.listdir(self.folder))
        except FileNotFoundError:
            return 0

    def __repr__(self) -> str:
        return f"SkippedRecords({self.count} skipped)"


@dataclasses.dataclass(frozen=True)
class CorruptPolicy:
    """Corrupt input on the grain path: raise (the default), or skip, print and count once.

    Args:
        skip: skip damaged records (`skip_corrupt=True`) instead of raising.
        skipped: where skipped records are counted; None with `skip`: a private one (printed
            once, counted nowhere else, as tf.data without a counter).

    Example:
        >>> try:
        ...     CorruptPolicy().corrupt("f record 3: undecodable image")
        ... except BadFileError as e:
        ...     print(e)
        f record 3: undecodable image; pass skip_corrupt=True to skip corrupt records
        >>> policy = CorruptPolicy(skip=True)
        >>> policy.corrupt("f record 3: undecodable image") is None, policy.skipped.count
        (True, 1)
    """

    skip: bool = False
    skipped: SkippedRecords | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.skip, bool):
            raise ValueError(f"skip must be a bool, got {self.skip!r}")
        if self.skipped is not None and not isinstance(self.skipped, SkippedRecords):
            raise ValueError(f"skipped must be a SkippedRecords or None, got {self.skipped!r}")
        if self.skip and self.skipped is None:
            object.__setattr__(self, "skipped", SkippedRecords())

    def corrupt(self, message: str, *, key: str | None = None) -> None:
        """A damaged record or image that `message` describes (naming its file and record):
        raises `BadFileError(message + SKIP_HINT)`, or, skipping, reports it once (told by
        `key`, the file and record; None: the message) and returns None (the caller drops
        the record)."""
        if not self.skip:
            raise BadFileError(message + SKIP_HINT)
        self.skipped.report(message, key=key)


# ---- tf.train.Example, protobuf wire format -------------------------------------------------
# Example{features: Features = 1}; Features{feature: map<string, Feature> = 1} (entries
# {key = 1, value = 2}); Feature{bytes_list = 1 | float_list = 2 | int64_list = 3}, each list
# {value = 1, repeated; numbers packed or not}.

_WANTED = {
    b"image/encoded",
    b"image/class/label",
    b"image/filename",
    b"image/object/bbox/xmin",
    b"image/object/bbox/ymin",
    b"image/object/bbox/xmax",
    b"image/object/bbox/ymax",
}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes):
    """Yields `(field number, wire type, value)`: an int for varints, bytes otherwise.

    A one-byte varint (a key, or a value or length under 128: most of a record's) is read
    here, the rest by `_varint`: a call per varint was most of the parsing time."""
    pos, end = 0, len(data)
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0 or wire == 2:
            if pos < end and data[pos] < 0x80:
                number, pos = data[pos], pos + 1
            else:
                number, pos = _varint(data, pos)
        if wire == 0:
            value = number
        elif wire == 2:
            length = number
            if pos + length > end:
                raise ValueError(f"field {field} runs past the end of its message")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if pos > end:
            raise ValueError(f"field {field} runs past the end of its message")
        yield field, wire, value


#: The wire types a value of each Feature kind may have: a bytes_list's are length-
#: delimited; a float_list's packed or fixed32; an int64_list's packed or varints.
_VALUE_WIRES = {1: (2,), 2: (2, 5), 3: (0, 2)}


def _feature_values(feature: bytes) -> tuple[int, list]:
    """`(kind, values)` of a serialized Feature (kind 1 bytes, 2 float, 3 int64).

    Raises:
        ValueError: a value of a wire type its kind cannot have (a bytes value given as a
            varint was `bytes(n)`, n zero bytes: gigabytes from a few damaged bytes).
    """
    for kind, wire, body in _fields(feature):
        if kind not in (1, 2, 3) or wire != 2:
            continue
        values: list = []
        for field, fwire, value in _fields(body):
            if field != 1:
                continue
            if fwire not in _VALUE_WIRES[kind]:
                raise ValueError(f"a value of wire type {fwire} in a list of kind {kind}")
            if kind == 1:
                values.append(bytes(value))
            elif kind == 2:
                # packed (wire type 2) or one fixed32 (wire type 5): little-endian floats
                if len(value) % 4:  # struct.error otherwise, which no policy catches
                    raise ValueError(f"a float list of {len(value)} bytes (not 4 a float)")
                values.extend(struct.unpack(f"<{len(value) // 4}f", value))
            elif fwire == 2:  # packed int64 varints
                pos = 0
                while pos < len(value):
                    v, pos = _varint(value, pos)
                    values.append(v - (1 << 64) if v >= 1 << 63 else v)
            else:
                values.append(value - (1 << 64) if value >= 1 << 63 else value)
        return kind, values
    return 0, []


def parse_features(serialized: bytes) -> dict[str, list]:
    """The ImageNet features of a serialized `tf.train.Example`: key -> list of values
    (bytes, float or int), only the keys `parse_example` uses.

    Raises:
        ValueError: not a well-formed Example (the reason).
    """
    out: dict[str, list] = {}
    # a memoryview: the nested messages are sliced without copies (the image's bytes are
    # copied once, into its value, not once per level)
    for field, wire, features in _fields(memoryview(serialized)):
        if field != 1 or wire != 2:
            continue
        for entry_field, entry_wire, entry in _fields(features):
            if entry_field != 1 or entry_wire != 2:
                continue
            key, value = b"", b""
            for f, w, v in _fields(entry):
                if f == 1 and w == 2:
                    key = v
                elif f == 2 and w == 2:
                    value = v
            key = bytes(key)
            if key in _WANTED:
                out[key.decode("utf-8")] = _feature_values(value)[1]
    return out


def parse_example(serialized: bytes) -> dict:
    """One ImageNet record's fields, as `tfrecord.parse_imagenet_example` gives them.

    Returns:
        `{"encoded": bytes, "label": int (0-based: stored label - 1), "filename": str,
        "boxes": float32 [n, 4] [ymin, xmin, ymax, xmax]}`.

    Raises:
        ValueError: a malformed Example, or no `image/encoded` / `image/class/label` (the
            reason; the caller names the file and record).

    Example:
        >>> from cvbench.data.tfrecord import imagenet_example
        >>> record = imagenet_example(encoded=b"jpeg", height=2, width=3, label=7, synset="n1",
        ...     text="seven", filename="a.JPEG", boxes=[(0.1, 0.2, 0.5, 0.75)])
        >>> parsed = parse_example(record)
        >>> parsed["encoded"], parsed["label"], parsed["filename"], parsed["boxes"].tolist()
        (b'jpeg', 6, 'a.JPEG', [[0.20000000298023224, 0.10000000149011612, 0.75, 0.5]])
    """
    features = parse_features(serialized)
    encoded = features.get("image/encoded") or []
    labels = features.get("image/class/label") or []
    if len(encoded) != 1 or not isinstance(encoded[0], bytes):
        raise ValueError("the record has no single image/encoded bytes value")
    if len(labels) != 1 or not isinstance(labels[0], int):
        raise ValueError("the record has no single image/class/label int64 value")
    names = features.get("image/filename") or [b""]
    keys = ("ymin", "xmin", "ymax", "xmax")
    columns = [features.get(f"image/object/bbox/{k}") or [] for k in keys]
    if box_lists_differ(columns):
        raise ValueError(BOX_LISTS_DIFFER)
    boxes = np.asarray(columns, np.float32).T.reshape(-1, 4)
    return {
        "encoded": encoded[0],
        "label": labels[0] - 1,
        "filename": names[0].decode("utf-8", "replace") if isinstance(names[0], bytes) else "",
        "boxes": boxes,
    }
