"""Atomic file writes: a reader never sees a half-written file.

Write to a temporary file in the destination's directory, flush and fsync it, then
`os.replace` it over the destination (atomic on POSIX within one file system).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary path next to `path`; renames it onto `path` on success.

    On an exception the temporary file is removed and `path` is left untouched.
    Use this for writers that want a file name (tf.io.TFRecordWriter, model.save).

    Args:
        path: the final destination.

    Yields:
        A `Path` in the same directory whose suffix matches `path` (some writers check it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent
    )
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.is_file():
            with open(tmp_path, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Opens a temporary file for writing that replaces `path` when the block succeeds.

    Args:
        path: the final destination.
        mode: "w" (text) or "wb" (binary).
        **kwargs: passed to `open` (for example `encoding`).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as f:
        yield f
        f.flush()


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Writes `obj` as indented JSON to `path` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
