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

The index folder is one cvbench owns (`cvbench.utils.files.owned_folder`): a link found in
its place (`DATA_DIR/idx -> /elsewhere`) is refused, never written through; the folder a
user names with `index_dir=` may itself be a link (`user_output`: the user chose it), an
empty name is refused. Every index file written is recorded as cvbench's
(`cvbench.utils.files.recording`), and an existing index file is replaced (stale, or with
`overwrite`) only when it is one a new index may replace (`regenerable_index`: cvbench wrote
it, or it is any well-formed index, which its shard gives again): a user's other file of
that name is refused before any index is written, with or without `overwrite`. A fresh index file,
whoever wrote it, is kept and used.

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
from cvbench.utils.files import (
    check_output,
    open_input,
    owned_folder,
    read_input,
    recording,
    user_output,
    written_by_cvbench,
)
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


def index_folder(
    data_dir: str | os.PathLike,
    index_dir: str | os.PathLike | None = None,
    *,
    create: bool = True,
) -> Path:
    """The folder the index files of the shards in `data_dir` are written to, checked: by
    default `data_dir/idx`, a folder cvbench owns (a link or a file in its place is refused);
    else `index_dir`, the user's choice (itself a link is followed once, `user_output`; an
    empty name is refused). Made where missing when `create`.

    Raises:
        ValueError: `index_dir` is empty (it would name the current folder).
        BadFileError: `idx` is a link.
        NotADirectoryError: a file (or, as `index_dir`, a link to nothing) in its place.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> index_folder(d) == d / "idx", (d / "idx").is_dir()
        (True, True)
        >>> index_folder(d, "")
        Traceback (most recent call last):
        ...
        ValueError: the index folder is empty (--index-dir ''): name a folder (. for the ...)
    """
    if index_dir is None:
        root, parts = Path(data_dir), (INDEX_DIR,)
    elif not os.fspath(index_dir).strip():
        raise ValueError(
            f"the index folder is empty (--index-dir {os.fspath(index_dir)!r}): name a folder "
            "(. for the current one)"
        )
    else:
        root, parts = Path(user_output(index_dir)), ()
    folder = root.joinpath(*parts)
    if not create and not root.is_dir():
        return folder  # nothing in its place yet: the writer makes (or refuses) `root`
    if create or (os.path.lexists(folder) and not os.path.islink(folder)):
        # A file (or a link to nothing, as `index_dir`) in its place: `make_dir`'s one
        # NotADirectoryError naming it ("is a file, not a folder").
        make_dir(root if os.path.islink(folder) else folder)
    return owned_folder(root, *parts, create=create)


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
    """Writes the index of one TFRecord file atomically, recorded as cvbench's
    (`cvbench.utils.files.recording`). It replaces whatever is at `index`: `write_indexes`
    checks first that a file there is cvbench's.

    Args:
        tfrecord: the data file.
        index: the index file; default `index_path(tfrecord)` in the checked `index_folder`.

    Returns:
        `(index file, number of records)`.

    Raises:
        BadFileError: a truncated file (named).
        BadFileError: the default index folder is a link or not a folder (`index_folder`).
        NotADirectoryError: a file where the folder of `index` should be.
    """
    entries = record_entries(tfrecord)
    if index is None:
        out = index_folder(Path(tfrecord).parent) / (Path(tfrecord).name + INDEX_SUFFIX)
    else:
        out = Path(index)
        make_dir(out.parent)
    with naming(out), recording(out), atomic_open(out, "w", encoding="ascii") as f:
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
    entries = _parse_index(path)
    end = entries[-1][0] + entries[-1][1] if entries else 0
    size = os.path.getsize(tfrecord)
    if end != size:
        raise ValueError(
            f"DALI index file {path} is stale: its {len(entries)} records end at byte {end} but "
            f"{tfrecord} has {size} bytes; {fix}"
        )
    return entries


def _parse_index(path: Path) -> list[Entry]:
    """The `(offset, size)` lines of the index file `path`.

    Raises:
        BadFileError: not a regular file, over `MAX_INDEX_BYTES`, or not 'offset size' lines.
    """
    entries = []
    data = read_input(path, limit=MAX_INDEX_BYTES, what="DALI index file")
    for n, line in enumerate(data.decode("ascii", errors="replace").splitlines(keepends=True), 1):
        parts = line.split()
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
            raise BadFileError(f"DALI index file {path} line {n} is not 'offset size': {line!r}")
        entries.append((int(parts[0]), int(parts[1])))
    return entries


def regenerable_index(path: str | os.PathLike) -> bool:
    """Whether the file at `path` may be replaced by a new index: one cvbench wrote and
    nobody changed (`written_by_cvbench`), or any well-formed index file ('offset size'
    lines: an older cvbench's, DALI's `tfrecord2idx`'s), which its shard gives again, so
    that replacing it loses nothing. A user's other file, a link or a folder is not.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "a.idx").write_text("0 2242\\n2242 2250\\n")
        >>> _ = (d / "b.idx").write_text("precious\\n")
        >>> regenerable_index(d / "a.idx"), regenerable_index(d / "b.idx")
        (True, False)
    """
    path = Path(path)
    if written_by_cvbench(path):
        return True
    if path.is_symlink() or not path.is_file():
        return False
    try:
        _parse_index(path)
    except (OSError, BadFileError):
        return False
    return True


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

    Every index file to write is checked before the first is written: its folder
    (`index_folder`: a link in place of `idx` refused) and, where a file is there already,
    that a new index may replace it (`regenerable_index`: cvbench's, or any well-formed
    index; a user's other file is never replaced, with or without `overwrite`). A stale
    index is rewritten.

    Args:
        files: TFRecord files.
        index_dir: where the index files go; default the `idx` folder beside each file.
        overwrite: rewrite indexes that are already fresh.
        progress: a progress bar on stderr (`cvbench.utils.progress.progress_bar`).

    Returns:
        An `IndexSummary`.

    Raises:
        ValueError: an empty `index_dir`; an index file to replace that cvbench did not
            write, or a link (exit 2 in the command); nothing is written then.
        BadFileError: a truncated file (named), the indexes written before it stay; a link
            or a file in place of the index folder, nothing written.
        OSError: an index cannot be written (a read-only folder, a full disk); the indexes
            written before it stay.
    """
    from cvbench.utils.progress import progress_bar

    summary = IndexSummary()
    todo = _indexes_to_write(files, index_dir, overwrite, summary)
    with progress_bar(
        total=len(todo), desc="index", unit="file", disable=not progress, file=sys.stderr
    ) as bar:
        for path, out in todo:
            _, count = write_index(path, out)
            summary.written += 1
            summary.records += count
            bar.update(1)
    return summary


def _indexes_to_write(
    files: Sequence[str | os.PathLike],
    index_dir: str | os.PathLike | None,
    overwrite: bool,
    summary: IndexSummary,
) -> list[tuple[str | os.PathLike, Path]]:
    """`(file, index file)` of the indexes `write_indexes` writes, each checked; counts the
    fresh ones kept in `summary.kept`."""
    folders: dict[Path, Path] = {}
    todo = []
    for path in files:
        parent = Path(path).parent
        if parent not in folders:
            folders[parent] = index_folder(parent, index_dir)
        out = folders[parent] / (Path(path).name + INDEX_SUFFIX)
        if not overwrite and is_fresh(path, folders[parent]):
            summary.kept += 1
            continue
        _check_replaceable(out, path)
        todo.append((path, out))
    return todo


def _check_replaceable(index: Path, tfrecord: str | os.PathLike) -> None:
    """Refuses (ValueError) an index file cvbench may not replace: a link, a file it did not
    write and that is no well-formed index (`regenerable_index`), the data file itself."""
    check_output(index, inputs=[tfrecord], overwrite=True, is_ours=regenerable_index)


def check_indexes_replaceable(
    files: Sequence[str | os.PathLike], *, index_dir: str | os.PathLike | None = None
) -> None:
    """Refuses, before any work, what would stop `write_indexes(files, overwrite=True)`
    after it: a link or a file in place of the index folder, an index file there that
    cvbench did not write (`build-imagenet --overwrite` rewrites every index after its
    shards).

    Raises:
        ValueError, BadFileError, NotADirectoryError: as `write_indexes`, naming the file.
    """
    for path in files:
        folder = index_folder(Path(path).parent, index_dir, create=False)
        _check_replaceable(folder / (Path(path).name + INDEX_SUFFIX), path)


def remove_indexes(shards: Iterable[str | os.PathLike]) -> list[Path]:
    """Removes the index files (`idx/<name>.idx`, beside each of `shards`) when a build
    deletes those shards: those a new index may replace (`regenerable_index`); a user's
    other file, a link and a link in place of `idx` are left alone. Returns the files
    removed.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "idx").mkdir()
        >>> _ = (d / "idx" / "a-00000-of-00001.idx").write_text("0 20\\n")  # any index
        >>> _ = (d / "idx" / "b-00000-of-00001.idx").write_text("notes\\n")  # a user's
        >>> [p.name for p in remove_indexes([d / "a-00000-of-00001", d / "b-00000-of-00001"])]
        ['a-00000-of-00001.idx']
    """
    removed = []
    for shard in shards:
        try:
            folder = index_folder(Path(shard).parent, create=False)
        except BadFileError:
            continue  # a link or a file in place of idx/: nothing of ours there
        index = folder / (Path(shard).name + INDEX_SUFFIX)
        if regenerable_index(index):
            index.unlink()
            removed.append(index)
    return removed


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
