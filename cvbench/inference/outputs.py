"""Checks made on output paths before anything is computed or written.

A command that would fail at its last step, after minutes of work, or that would replace a
file it must not, is stopped before it starts: an output folder whose path runs through a
file (`NotADirectoryError`, an `OSError` naming the file), an output file that is an input
image, an existing output file without `overwrite`, a folder that is never replaced (the
current folder, one of its parents, the home folder, `/`), or that is not a previous
cvbench export where `cvbench export --overwrite` would replace it (`check_replaceable`), or a
folder that refuses writes (`check_writable`: read-only, no permission).

A previous export is known by cvbench's own records, never by its contents' look: a TFLite
file is one `record_output` listed and nobody changed since (`written_by_cvbench`); a
SavedModel folder holds the `EXPORT_MARKER` and, in every folder of its tree, only files that
export wrote and recorded (`record_tree`), so that a file a user put into `assets/` is never
deleted by `--overwrite`.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cvbench.utils.errors import BadFileError, naming
from cvbench.utils.files import OUTPUTS_LIST, read_json, tree_written_by_cvbench, written_by_cvbench

#: The file in a SavedModel folder that says cvbench exported it (TF Serving ignores it).
EXPORT_MARKER = "cvbench_export.json"
#: What a SavedModel export holds: the marker, the graph, its fingerprint, the variables.
_SAVED_MODEL_ENTRIES = {EXPORT_MARKER, "saved_model.pb", "fingerprint.pb", "variables", "assets"}
#: The file identifier of a TFLite flatbuffer (bytes 4 to 8).
TFLITE_IDENTIFIER = b"TFL3"
#: The largest export marker read.
_MARKER_LIMIT = 1 << 20


def check_writable(path: str | os.PathLike, *, folder: bool = False) -> None:
    """Checks, before any work, that the file `path` (or, with `folder`, files inside the
    folder `path`) can be created: a temporary file is made and removed in the nearest
    folder that exists (root ignores permission bits, a read-only disk it does not).

    Raises:
        OSError: naming `path` (read-only file system, permission denied, ...).
    """
    given = os.fspath(path)  # named as the user gave it
    path = Path(os.path.abspath(path))
    start = path if folder else path.parent
    existing = next((p for p in (start, *start.parents) if os.path.lexists(p)), None)
    if existing is None or not existing.is_dir():
        return  # check_folder_path / check_parent_path name what stands in the way
    try:
        fd, probe = tempfile.mkstemp(prefix=".cvbench-write-check.", dir=existing)
    except OSError as e:
        raise OSError(e.errno, e.strerror, given) from None
    os.close(fd)
    os.unlink(probe)


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
    for parent in Path(path).parents:  # as given (named so); "." ends a relative path
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


def errors_naming(path: str | os.PathLike):
    """`cvbench.utils.errors.naming(path, replace=True)`: an `OSError` met while writing a
    temporary file beside `path` names `path`, the file the user asked for."""
    return naming(path, replace=True)


def is_cvbench_export(path: str | os.PathLike) -> bool:
    """Whether `path` is what `export_for_serving` wrote (module docstring): a TFLite file
    it recorded, unchanged, or a SavedModel folder holding its `EXPORT_MARKER` and nothing
    but the files export wrote and recorded, unchanged (not a symbolic link either way).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "m.tflite").write_bytes(b"1234TFL3")  # the bytes alone prove nothing
        >>> is_cvbench_export(d / "m.tflite")
        False
    """
    path = Path(path)
    if path.is_symlink():
        return False
    if path.is_file():
        return written_by_cvbench(path)
    if not path.is_dir():
        return False
    names = {p.name for p in path.iterdir()}
    if EXPORT_MARKER not in names or not names <= {*_SAVED_MODEL_ENTRIES, OUTPUTS_LIST}:
        return False
    try:
        marker = read_json(path / EXPORT_MARKER, limit=_MARKER_LIMIT, what="export marker")
    except (OSError, BadFileError):
        return False
    return (
        isinstance(marker, dict)
        and marker.get("cvbench_export") == 1
        and tree_written_by_cvbench(path)
    )


def check_replaceable(out: Path, *, overwrite: bool, label: str | None = None) -> None:
    """Checks that writing an export at `out` replaces nothing, or (with `overwrite`) a
    previous cvbench export that is not a protected folder (module docstring).

    Raises:
        FileExistsError: for an existing `out` without `overwrite`.
        ValueError: for an `out` that `overwrite` may not replace, saying nothing was deleted.
    """
    label = label or str(out)
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise FileExistsError(f"{label} exists; pass overwrite=True to replace it")
    why = protected_folder(out) if out.is_dir() and not out.is_symlink() else None
    if why is not None:
        raise ValueError(f"{label} is {why}, which is never replaced; nothing was deleted")
    if not is_cvbench_export(out):
        kind = "symbolic link" if out.is_symlink() else "folder" if out.is_dir() else "file"
        raise ValueError(f"the {kind} {label} is not a cvbench export; nothing was deleted")
