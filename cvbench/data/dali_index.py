"""DALI index files for TFRecord shards: one `"offset size"` line per record.

NVIDIA DALI's TFRecord reader (`fn.readers.tfrecord`) needs, for every data file, an index
file listing where each record starts and how many bytes it takes, in the format of DALI's
`tfrecord2idx` script: one line per record, `"<offset> <size>\\n"` in decimal, where `size`
counts the whole framed record (8-byte length, 4-byte length CRC, the data, 4-byte data CRC,
i.e. `length + 16`). This module writes them in pure Python from the record framing
(`cvbench.data.tfrecord`), with no DALI or TensorFlow import, atomically
(`cvbench.utils.io.atomic_open`, the mode of a new file under the umask).

Layout: the index of `DATA_DIR/train-00000-of-01024` is `DATA_DIR/idx/train-00000-of-01024.idx`
(`index_path`). A separate folder keeps the index files out of every shard glob (a
`file_pattern` such as `train-*` would otherwise match them too); `cvbench build-imagenet`
writes them after the shards and `cvbench dali-index DATA_DIR` makes them for existing
records. `index_dir=` points elsewhere (a read-only data set).

An index is *stale* when its records do not end where its TFRecord file ends (the file was
rebuilt or appended to); `read_index` then raises an error naming both files and the command
that rewrites them. A malformed index (or one that is not a regular file, or over
`MAX_INDEX_BYTES`) is a `BadFileError` naming it, as is a truncated TFRecord file.

`cvbench dali-index` indexes the shards of every split of a folder as the readers list them
(`cvbench.data.read.splits.every_split_files`).
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cvbench.data.safe_paths import make_dir
from cvbench.data.tfrecord import scan_tfrecord
from cvbench.utils.errors import BadFileError, naming
from cvbench.utils.files import open_input, read_input
from cvbench.utils.io import atomic_open

INDEX_DIR = "idx"
INDEX_SUFFIX = ".idx"
#: The largest index file read: 40 bytes a line would index 25 million records.
MAX_INDEX_BYTES = 1 << 30

Entry = tuple[int, int]  # (offset, size) of one framed record


def index_path(tfrecord: str | os.PathLike, index_dir: str | os.PathLike | None = None) -> Path:
    """Where the index of `tfrecord` lives: `<index_dir>/<name>.idx`, by default in the `idx`
    folder next to the file (`data/train-00000-of-00001` -> `data/idx/train-00000-of-00001.idx`).
    """
    path = Path(tfrecord)
    folder = Path(index_dir) if index_dir is not None else path.parent / INDEX_DIR
    return folder / (path.name + INDEX_SUFFIX)


def record_entries(tfrecord: str | os.PathLike) -> list[Entry]:
    """`(offset, size)` of each record of a TFRecord file, from its length headers.

    Raises:
        BadFileError: the file ends inside a record (truncated); the message names the file.
        FileNotFoundError: no such file.
    """
    scan = scan_tfrecord(tfrecord)
    if scan.truncated:
        raise BadFileError(f"{scan.describe()}; build or copy it again before indexing it")
    entries, offset = [], 0
    with open_input(tfrecord, what="TFRecord file") as f:
        for _ in range(scan.num_records):
            (length,) = struct.unpack("<Q", f.read(8))
            size = length + 16
            entries.append((offset, size))
            offset += size
            f.seek(offset)
    return entries


def format_entries(entries: Iterable[Entry]) -> str:
    """The text of an index file (`tfrecord2idx`'s format)."""
    return "".join(f"{offset} {size}\n" for offset, size in entries)


def write_index(
    tfrecord: str | os.PathLike, index: str | os.PathLike | None = None
) -> tuple[Path, int]:
    """Writes the index of one TFRecord file atomically.

    Args:
        tfrecord: the data file.
        index: the index file; default `index_path(tfrecord)`.

    Returns:
        `(index file, number of records)`.

    Raises:
        BadFileError: a truncated file (named).
        NotADirectoryError: a file where the index folder should be.
    """
    entries = record_entries(tfrecord)
    out = Path(index) if index is not None else index_path(tfrecord)
    make_dir(out.parent)
    with naming(out), atomic_open(out, "w", encoding="ascii") as f:
        f.write(format_entries(entries))
    return out, len(entries)


def read_index(
    tfrecord: str | os.PathLike, index_dir: str | os.PathLike | None = None
) -> list[Entry]:
    """The entries of the index of `tfrecord`, checked against the file.

    Raises:
        FileNotFoundError: no index file (the message names it and `cvbench dali-index`).
        BadFileError: a malformed index (not a regular file, over `MAX_INDEX_BYTES`, not
            'offset size' lines).
        ValueError: an index whose records do not end at the end of the file (stale: the
            file changed after indexing).
    """
    path = index_path(tfrecord, index_dir)
    data_dir = Path(tfrecord).parent
    fix = f"run `cvbench dali-index {data_dir}` to write the index files"
    if index_dir is not None:
        fix = f"run `cvbench dali-index {data_dir} --index-dir {index_dir}`"
    if not path.is_file():
        raise FileNotFoundError(f"no DALI index file {path} for {tfrecord}; {fix}")
    entries = []
    data = read_input(path, limit=MAX_INDEX_BYTES, what="DALI index file")
    for n, line in enumerate(data.decode("ascii", errors="replace").splitlines(keepends=True), 1):
        parts = line.split()
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
            raise BadFileError(f"DALI index file {path} line {n} is not 'offset size': {line!r}")
        entries.append((int(parts[0]), int(parts[1])))
    end = entries[-1][0] + entries[-1][1] if entries else 0
    size = os.path.getsize(tfrecord)
    if end != size:
        raise ValueError(
            f"DALI index file {path} is stale: its {len(entries)} records end at byte {end} but "
            f"{tfrecord} has {size} bytes; {fix}"
        )
    return entries


def is_fresh(tfrecord: str | os.PathLike, index_dir: str | os.PathLike | None = None) -> bool:
    """Whether the index of `tfrecord` exists and ends where the file ends."""
    try:
        read_index(tfrecord, index_dir)
    except (FileNotFoundError, ValueError):
        return False
    return True


def write_indexes(
    files: Sequence[str | os.PathLike],
    *,
    index_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> IndexSummary:
    """Writes the index of each file (skipping fresh ones unless `overwrite`).

    Args:
        files: TFRecord files.
        index_dir: where the index files go; default the `idx` folder beside each file.
        overwrite: rewrite indexes that are already fresh.
        progress: a progress bar on stderr (`cvbench.utils.progress.progress_bar`).

    Returns:
        An `IndexSummary`.

    Raises:
        BadFileError: a truncated file (named); the indexes written before it stay.
        OSError: an index cannot be written (a read-only folder, a full disk, a file where
            the index folder should be); the indexes written before it stay.
    """
    from cvbench.utils.progress import progress_bar

    summary = IndexSummary()
    with progress_bar(
        total=len(files), desc="index", unit="file", disable=not progress, file=sys.stderr
    ) as bar:
        for path in files:
            if not overwrite and is_fresh(path, index_dir):
                summary.kept += 1
            else:
                _, count = write_index(path, index_path(path, index_dir))
                summary.written += 1
                summary.records += count
            bar.update(1)
    return summary


@dataclass
class IndexSummary:
    """What `write_indexes` did: index files written (and their records) and kept fresh."""

    written: int = 0
    kept: int = 0
    records: int = 0

    def format(self) -> str:
        """One line, e.g. 'DALI index files: 3 written (1,250 records), 1 already up to date'."""
        return (
            f"DALI index files: {self.written} written ({self.records:,} records), "
            f"{self.kept} already up to date"
        )
