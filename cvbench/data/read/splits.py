"""A split's TFRecord shards, listed once for every reader, without TensorFlow.

`list_split_files(data_dir, split)` is how the tf.data readers (`cvbench.data.read.imagenet`,
`cvbench.data.read.coco`), grain, DALI and `cvbench bench-input` find a split's files:
`<split>-NNNNN-of-NNNNN` in `data_dir`, a literal path (`cvbench.utils.files.match_files`:
`x[12]` never reads `x1` and `x2`). It refuses what would silently read less than the split:

* a set with shards missing (`cvbench.utils.files.check_shard_set`), naming them;
* a 0-byte shard, the mark of a truncated copy, naming it. The builders write one only for a
  shard all of whose images they skipped (unreadable, too large), and their manifest
  (`cvbench_manifest.json`, `cvbench.data.builders.manifest`) then records it at 0 bytes: a
  shard recorded so is read (it holds no records).

`every_split_files(data_dir)` lists every split of a folder so (what `cvbench dali-index`
indexes). The files a `file_pattern` names are the caller's choice (one shard of a set,
another writer's file that holds no records) and are not checked.

`records_identity(files)` tells one shard set from another build or sharding of the records
without reading them (what a resume compares: the data position it restores counts batches
of its own records).
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cvbench.data.read.raw_data import raw_data_message
from cvbench.data.safe_paths import check_split_name
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import check_shard_set, match_files, read_json

#: The builders' manifest (`cvbench.data.builders.manifest.MANIFEST_NAME`, which `read/`
#: may not import) and the largest one read (its `MAX_MANIFEST_BYTES`).
BUILD_MANIFEST = "cvbench_manifest.json"
MAX_BUILD_MANIFEST_BYTES = 64 << 20
_INDEX = "[0-9]" * 5
_ANY_SHARD = f"*-{_INDEX}-of-{_INDEX}"
_SHARD_NAME = re.compile(r"(.+)-[0-9]{5}-of-[0-9]{5}")


def split_glob(split: str) -> str:
    """The file-name pattern of a split's shards, the split name matched literally.

    Example:
        >>> split_glob("train") == "train-" + "[0-9]" * 5 + "-of-" + "[0-9]" * 5
        True
        >>> split_glob("a[1]").startswith("a[[]1]-")
        True
    """
    return f"{glob.escape(split)}-{_INDEX}-of-{_INDEX}"


def list_split_files(
    data_dir: str | os.PathLike, split: str, file_pattern: str | None = None
) -> list[str]:
    """The sorted shard files of `split` in `data_dir`.

    Args:
        data_dir: the folder of the TFRecord files.
        split: split name, e.g. 'train' or 'validation' ('coco_val.record' for COCO).
        file_pattern: a shell pattern of file names to read instead of the split's shards;
            it may name sub-folders of `data_dir` (`train/*.tfrecord`), literal as
            `data_dir` is. Its files are the caller's choice, not checked.

    Raises:
        ValueError: without `file_pattern`, `split` is no plain split name (`../x` would read
            another folder's shards; `cvbench.data.safe_paths.check_split_name`).
        BadFileError: the split's shard set is incomplete (`check_shard_set`), or one of its
            shards is 0 bytes and the folder's build manifest does not record it so.
        FileNotFoundError: `data_dir` does not exist or nothing matches; the message says
            what was looked for, where, and which shard-like files are there; for a folder
            of raw images (class folders, COCO JSON), the builder command that makes its
            records (`raw_data.raw_data_message`).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> for name in ("train-00000-of-00002", "train-00001-of-00002", "val-00000-of-00001"):
        ...     _ = (d / name).write_bytes(b"records")
        >>> [Path(p).name for p in list_split_files(d, "train")]
        ['train-00000-of-00002', 'train-00001-of-00002']
    """
    pattern = file_pattern or split_glob(check_split_name(split))
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data directory {root} does not exist")
    files = [str(p) for p in match_files(root, pattern)]
    if not files:
        raw = raw_data_message(root)
        if raw is not None:  # raw images given where records were expected
            raise FileNotFoundError(raw)
        present = sorted({n.split("-")[0] for n in os.listdir(root) if "-of-" in n})
        hint = f"; shard files present for: {', '.join(present)}" if present else ""
        looked_for = file_pattern or f"{split}-?????-of-?????"  # the shards' names, readably
        raise FileNotFoundError(f"no TFRecord files matching {looked_for!r} in {root}{hint}")
    if file_pattern is None:
        check_shard_set(files, split=split, folder=root)
        _check_no_empty_shard(files, root)
    return files


def _check_no_empty_shard(files: list[str], root: Path) -> None:
    """Refuses a 0-byte file among a split's shards `files` unless the build manifest of
    `root` records that shard at 0 bytes (every image of it skipped)."""
    empty = [path for path in files if os.stat(path).st_size == 0]
    if not empty:
        return
    built_empty = _built_empty_shards(root)
    for path in empty:
        if os.path.basename(path) not in built_empty:
            raise BadFileError(
                f"{path} is 0 bytes: a truncated copy? cvbench's builders write an empty "
                f"shard only when they skipped every image of it, and record it so in "
                f"{BUILD_MANIFEST}; copy it again (with that file) or build the records again"
            )


def _built_empty_shards(root: Path) -> set[str]:
    """The shard names the build manifest of `root` records at 0 bytes (none when there is
    no readable manifest)."""
    path = root / BUILD_MANIFEST
    try:
        manifest = read_json(path, limit=MAX_BUILD_MANIFEST_BYTES, what="manifest")
    except (OSError, BadFileError):
        return set()
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    if not isinstance(shards, dict):
        return set()
    return {
        name
        for name, entry in shards.items()
        if isinstance(entry, dict) and entry.get("bytes") == 0 and entry.get("records") == 0
    }


def every_split_files(data_dir: str | os.PathLike) -> list[str]:
    """The sorted TFRecord shards (`<split>-NNNNN-of-NNNNN`) of `data_dir`, every split,
    each split listed by `list_split_files` (what `cvbench dali-index` indexes: never a set
    the readers would refuse).

    Raises:
        FileNotFoundError: no such directory, or no shard in it.
        BadFileError: a split's shard set is incomplete, or one of its shards is 0 bytes
            and the build manifest does not record it so (named); or a shard's split name
            is no plain split name (`cvbench.data.safe_paths.check_split_name`).
    """
    root = Path(data_dir)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise FileNotFoundError(f"data directory {root} {what}")
    names = [p.name for p in match_files(root, _ANY_SHARD)]
    splits = sorted({m.group(1) for n in names if (m := _SHARD_NAME.fullmatch(n))})
    for split in splits:
        try:
            check_split_name(split)
        except ValueError as e:  # a file no builder writes: named, not read as a split
            raise BadFileError(f"{root}: {e}; rename or remove its shard files") from None
    if not splits:
        raise FileNotFoundError(f"no TFRecord shards named <split>-NNNNN-of-NNNNN in {root}")
    return sorted(f for split in splits for f in list_split_files(root, split))


def records_identity(files: Sequence[str | os.PathLike]) -> dict[str, Any]:
    """What tells the shard set `files` (a split's, `list_split_files`) from another build
    or sharding of the records, cheaply (one `stat` per file and the build manifest; no
    record read): `{"shards", "bytes", "records", "files_sha256"}`: the number of files,
    their total size, the records the build manifest of their folder counts for them (None
    when it does not record every one of them), and the SHA-256 over each file's name and
    size in order. Records copied or moved to another folder keep it.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> for name, size in (("train-00000-of-00002", 3), ("train-00001-of-00002", 5)):
        ...     _ = (d / name).write_bytes(b"r" * size)
        >>> identity = records_identity(list_split_files(d, "train"))
        >>> identity["shards"], identity["bytes"], identity["records"]
        (2, 8, None)
    """
    digest = hashlib.sha256()
    sizes = []
    for path in files:
        size = os.stat(path).st_size
        sizes.append(size)
        name = os.path.basename(os.fspath(path))
        digest.update(f"{name}\t{size}\n".encode("utf-8", "surrogateescape"))
    return {
        "shards": len(sizes),
        "bytes": sum(sizes),
        "records": _manifest_records(files),
        "files_sha256": digest.hexdigest(),
    }


def _manifest_records(files: Sequence[str | os.PathLike]) -> int | None:
    """The records the build manifest of the folder of `files` counts for them, or None
    (files in several folders, no readable manifest, or one of them not recorded)."""
    folders = {os.path.dirname(os.path.abspath(os.fspath(p))) for p in files}
    if len(folders) != 1:
        return None
    try:
        manifest = read_json(
            Path(folders.pop()) / BUILD_MANIFEST, limit=MAX_BUILD_MANIFEST_BYTES, what="manifest"
        )
    except (OSError, BadFileError):
        return None
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    if not isinstance(shards, dict):
        return None
    total = 0
    for path in files:
        entry = shards.get(os.path.basename(os.fspath(path)))
        records = entry.get("records") if isinstance(entry, dict) else None
        if not isinstance(records, int) or isinstance(records, bool) or records < 0:
            return None
        total += records
    return total
