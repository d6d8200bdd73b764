"""Checks made on output paths before anything is computed or written.

A command that would fail at its last step, after minutes of work, or that would replace a
file it must not, is stopped before it starts: an output folder whose path runs through a
file (`NotADirectoryError`, an `OSError` naming the file), an output file that is an input
image, an existing output file without `overwrite`, a folder that is never replaced (the
current folder, one of its parents, the home folder, `/`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path


def check_folder_path(path: str | os.PathLike) -> None:
    """Checks that a folder can be at `path`: nothing there but a folder, and no file in
    the way of creating it.

    Raises:
        NotADirectoryError: naming `path` or the ancestor that is not a folder.
    """
    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    check_parent_path(path)


def check_parent_path(path: str | os.PathLike) -> None:
    """Checks that the folders above `path` are folders where they exist (so that they can
    be created where they do not).

    Raises:
        NotADirectoryError: naming the first ancestor that is not a folder.
    """
    for parent in Path(os.path.abspath(path)).parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(parent))
            return


def _file_key(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_output_files(
    paths: Sequence[str | os.PathLike],
    *,
    input_files: Sequence[str | os.PathLike] = (),
    overwrite: bool = False,
    what: str = "output",
) -> None:
    """Checks that writing `paths` replaces no input file (the same file, through any link),
    no folder, and no existing file unless `overwrite`.

    Args:
        paths: the files to write.
        input_files: the files read.
        overwrite: replace existing files (never an input, never a folder).
        what: what the files are, for the messages ("drawing").

    Raises:
        ValueError: naming the first path that may not be written.

    Example:
        >>> check_output_files(["/"], what="drawing")
        Traceback (most recent call last):
        ...
        ValueError: the drawing / exists and is not a file
    """
    inputs = {key: Path(p) for p in input_files if (key := _file_key(Path(p))) is not None}
    for path in map(Path, paths):
        if not os.path.lexists(path):
            check_parent_path(path)
            continue
        hit = inputs.get(_file_key(path))
        if hit is not None:
            raise ValueError(
                f"the {what} {path} would overwrite the input image {hit}; write it elsewhere"
            )
        if path.is_dir() or not (path.is_symlink() or path.is_file()):
            raise ValueError(f"the {what} {path} exists and is not a file")
        if not overwrite:
            raise ValueError(f"the {what} {path} exists; pass overwrite=True to replace it")


def protected_folder(path: str | os.PathLike) -> str | None:
    """Why the folder `path` is never replaced, or None: the current folder, a parent of it,
    the home folder or `/` (symbolic links resolved).

    Example:
        >>> protected_folder(".")
        'the current folder'
        >>> protected_folder("/")
        'the root folder'
    """
    target = Path(path).resolve()
    cwd = Path.cwd().resolve()
    if target == Path(target.anchor):
        return "the root folder"
    if target == cwd:
        return "the current folder"
    if target in cwd.parents:
        return "a parent of the current folder"
    home = os.path.expanduser("~")
    if home != "~" and target == Path(home).resolve():
        return "the home folder"
    return None
