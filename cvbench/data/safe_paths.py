"""Names and folders the data tools write to: checked so that nothing lands outside its folder.

The data tools turn names read from input files into paths (a WNID from the devkit's
`meta.mat` becomes `val/<WNID>/`, a tar member name a file name, a COCO `file_name` the image
to read). `plain_name` and `relative_name` refuse the names that would leave their folder;
`check_split_name` is the one check of a split name (`coco_<split>.record-*`,
`<split>-NNNNN-of-NNNNN`, `instances_<split>.json`) for every builder and reader;
`is_inside` tells whether one folder is inside another (after resolving symbolic links);
`make_dir` creates an output folder or says in one line why it cannot (a file, or a symbolic
link to nothing, in its place). Writes name their file in errors through
`cvbench.utils.errors.naming`. No TensorFlow import.
"""

from __future__ import annotations

import errno
import os
import posixpath
from pathlib import Path


def is_inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether `path` is `folder` or below it, both resolved (symbolic links followed; a
    missing path is resolved as far as it exists).

    Example:
        >>> is_inside("/data/raw/train/out", "/data/raw"), is_inside("/data/out", "/data/raw")
        (True, False)
    """
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


def plain_name(name: str) -> bool:
    """Whether `name` is one path component: not empty, `.`, `..`, and without a separator
    or a NUL byte.

    Example:
        >>> plain_name("n01440764"), plain_name("../evil"), plain_name("..")
        (True, False, False)
    """
    return (
        bool(name)
        and name not in (".", "..")
        and "/" not in name
        and "\0" not in name
        and (os.sep == "/" or os.sep not in name)
    )


#: The longest split name, in UTF-8 bytes: a file name may have 255, and the longest name made
#: from a split (`coco_<split>.record-NNNNN-of-NNNNN`) adds 33.
MAX_SPLIT_NAME_BYTES = 200


def check_split_name(name: object) -> str:
    r"""`name` when it is a split name the builders and readers may make file names of, else
    `ValueError` naming it (exit 2 in the CLI).

    A split name is one plain file-name component (`plain_name`): not empty, not `.` or
    `..`, no `/`, `\` or NUL, so that no name made from it (`coco_<split>.record-*`,
    `<split>-NNNNN-of-NNNNN`, `instances_<split>.json`) leaves its folder. It is also
    printable (no newline or other control character, which would forge a line of a
    summary), does not start with `-` (it would read as an option to the shell tools that
    handle the files), has no space at either end, and is at most `MAX_SPLIT_NAME_BYTES`
    bytes in UTF-8.

    Example:
        >>> check_split_name("val"), check_split_name("coco_val.record")
        ('val', 'coco_val.record')
        >>> check_split_name("a/../../b")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: split name 'a/../../b' is not one plain file name: ...
    """
    if not isinstance(name, str):
        raise ValueError(f"split name must be a string such as 'train' or 'val', got {name!r}")
    if not (
        plain_name(name)
        and "\\" not in name
        and name.isprintable()
        and name == name.strip()
        and not name.startswith("-")
    ):
        raise ValueError(
            f"split name {name!r} is not one plain file name: it may not be empty, '.' or "
            "'..', hold '/', '\\' or a control character, start with '-', or start or end "
            "with a space (such as 'train' or 'val')"
        )
    size = len(name.encode("utf-8"))
    if size > MAX_SPLIT_NAME_BYTES:
        raise ValueError(
            f"split name {name[:32]!r}... is {size} bytes long in UTF-8: at most "
            f"{MAX_SPLIT_NAME_BYTES}"
        )
    return name


def relative_name(name: str) -> bool:
    """Whether `name` is a relative '/'-separated path that stays below its folder: no
    absolute path, no `..` component, no NUL byte (a COCO `file_name` such as
    `train2017/000000000009.jpg`).

    Example:
        >>> relative_name("a/b.jpg"), relative_name("../b.jpg"), relative_name("/etc/passwd")
        (True, False, False)
    """
    if not name or "\0" in name or name.startswith(("/", "\\")) or os.path.isabs(name):
        return False
    parts = posixpath.normpath(name.replace("\\", "/")).split("/")
    return ".." not in parts and parts != ["."]


def make_dir(path: str | os.PathLike) -> Path:
    """Creates the folder `path` (and its parents) if missing; returns it.

    Raises:
        NotADirectoryError: something else has the name: a file, or a symbolic link to
            nothing (the message names the path).
        OSError: the folder cannot be created (a read-only file system, ...).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        what = "a symbolic link to nothing" if path.is_symlink() else "a file"
        raise NotADirectoryError(
            errno.ENOTDIR, f"is {what}, not a folder", os.fspath(path)
        ) from None
    return path
