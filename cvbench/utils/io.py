"""Atomic file writes: a reader never sees a half-written file.

Write to a temporary file in the destination's directory, flush and fsync it, then
`os.replace` it over the destination (atomic on POSIX within one file system).

The result gets the permissions a plain `open()` (or `os.mkdir`) would give a new file under
the process's umask: `0o666 & ~umask` for a file, `0o777 & ~umask` for a directory (the
temporary from `tempfile.mkstemp` is private, 0o600, until it is complete). Replacing an
existing file of the same kind keeps that file's mode (a file the user made 0o600 stays
0o600), as rewriting it in place with `open(path, "w")` would.

A temporary is named `.<final name>.cvbench-<host>-<pid>-<random>.tmp<final suffix>`
(`<host>`: `HOST_TAG`, 8 hex digits of this machine's name and process-id namespace; a final
name too long for that within the file system's 255 bytes is shortened, `temporary_stem`), so
that one left by a writer killed outright (a SIGKILL runs no `finally`) is recognized: the
first `atomic_path` of a process into a directory removes there the temporaries of that
naming whose writer ran where this process runs and no longer runs
(`remove_dead_temporaries`, judged by `writer_dead`), and never any other file (another
machine's, or another container's with the same host name, on a shared file system, is
left to it).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import json
import math
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_PROC_STATUS = "/proc/self/status"
_UMASK_LOCK = threading.Lock()
#: The name of an `atomic_path` temporary: `.<final name>.cvbench-<host>-<pid>-<mkstemp's
#: 8 characters>.tmp<the final name's suffix>`.
_TEMPORARY = re.compile(
    r"\.(?P<name>.+)\.cvbench-(?P<host>[0-9a-f]{8})-(?P<pid>[1-9][0-9]{0,9})-[a-z0-9_]{8}"
    r"\.tmp(?P<suffix>(\.[^.]*)?)"
)
_PID_NAMESPACE = "/proc/self/ns/pid"


def _host_tag() -> str:
    """8 hex digits of this machine's name and process-id namespace: where a pid means
    something. Containers sharing the host's name and network (Docker `--net=host`,
    Kubernetes `hostNetwork`) have their own pid namespace, so each has its own tag."""
    where = socket.gethostname()
    with contextlib.suppress(OSError):
        where += f"/pid-namespace:{os.stat(_PID_NAMESPACE).st_ino}"
    return hashlib.sha256(where.encode("utf-8", "replace")).hexdigest()[:8]


#: Where this process runs, in the names of temporaries (`_host_tag`).
HOST_TAG = _host_tag()


def process_running(pid: int) -> bool:
    """Whether a process `pid` runs on this machine (another user's counts; a pid this
    system cannot have is treated as running: nothing is removed on its account)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # another user's process, or a pid out of range of this system
    return True


def writer_dead(host: str, pid: str | int) -> bool:
    """Whether the writer a temporary is tagged with (`<host>-<pid>`, `HOST_TAG` and
    `os.getpid()` when it was made) ran where this process runs and no longer runs; the one
    rule by which cvbench removes what a killed writer left (`remove_dead_temporaries`,
    `files.remove_dead_staging`). Another machine's or container's writer is never dead
    here: its pid says nothing.

    Example:
        >>> writer_dead(HOST_TAG, 999999999), writer_dead(HOST_TAG, os.getpid())
        (True, False)
        >>> writer_dead("00000000" if HOST_TAG != "00000000" else "11111111", 999999999)
        False
    """
    pid = str(pid)  # ASCII digits only: "²".isdigit() is True, int("²") a ValueError
    return host == HOST_TAG and pid.isascii() and pid.isdigit() and not process_running(int(pid))


def remove_dead_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Removes the `atomic_path` temporaries in `folder` whose writing process no longer
    runs (killed outright mid-write); returns them. Only names of that exact form (with the
    suffix of the final name they carry) are touched, a link never; a running process's
    temporary, and every other file, is left alone.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> dead = f".out.json.cvbench-{HOST_TAG}-999999999-abcd1234.tmp.json"
        >>> (d / dead).write_text("{")  # a writer on this machine that no longer runs
        1
        >>> (d / ".out.json.999999999-abcd1234.tmp.json").write_text("{")  # not cvbench's
        1
        >>> [p.name for p in remove_dead_temporaries(d)] == [dead]
        True
        >>> sorted(p.name for p in d.iterdir())
        ['.out.json.999999999-abcd1234.tmp.json']
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = entry.name.startswith(".") and _TEMPORARY.fullmatch(entry.name)
        if not match or Path(match["name"]).suffix != match["suffix"]:
            continue
        if entry.is_symlink() or not writer_dead(match["host"], match["pid"]):
            continue  # a link, a running writer, or another machine's or container's
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        removed.append(path)
    return removed


_SWEPT: set[str] = set()
os.register_at_fork(after_in_child=_SWEPT.clear)  # a forked child sweeps for itself


def _sweep_once(folder: Path) -> None:
    """`remove_dead_temporaries(folder)` at this process's first write into `folder`: the
    writers killed before it started are dead for good."""
    key = os.path.abspath(folder)
    if key not in _SWEPT:
        _SWEPT.add(key)
        remove_dead_temporaries(folder)


def current_umask() -> int:
    """The process's umask, e.g. 0o022, read without changing it where the system allows.

    Linux reports it in `/proc/self/status` (`Umask:`); elsewhere it is read by setting and
    restoring it (`os.umask`), under a lock, which leaves a short window in which files other
    threads create get the temporary mask.
    """
    try:
        with open(_PROC_STATUS, encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def _publish_mode(path: Path, replacing: Path | None = None) -> None:
    """Gives `path` the mode of `replacing` when that exists and is of the same kind (file
    or directory, not a link), else the mode a new one gets under the current umask."""
    is_dir = path.is_dir()
    if replacing is not None:
        try:
            old = os.lstat(replacing)
        except OSError:
            old = None
        if old is not None and (stat.S_ISDIR(old.st_mode) if is_dir else stat.S_ISREG(old.st_mode)):
            os.chmod(path, stat.S_IMODE(old.st_mode))
            return
    base = 0o777 if is_dir else 0o666
    os.chmod(path, base & ~current_umask())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary path next to `path`; renames it onto `path` on success.

    On an exception the temporary file is removed and `path` is left untouched.
    Use this for writers that want a file name (tf.io.TFRecordWriter, model.save). The
    writer may also replace the temporary file with a directory.

    Before the rename the result gets the mode of the file it replaces, or else of a new file
    (`0o666 & ~umask`) or directory (`0o777 & ~umask`); missing parent directories are
    created with `0o777 & ~umask`.

    Temporaries of this naming left in that directory by killed writers are removed first,
    at this process's first write into it (`remove_dead_temporaries`: a command writing
    thousands of files into one folder scans it once, not once per file).

    Args:
        path: the final destination.

    Yields:
        A `Path` in the same directory whose suffix matches `path` (some writers check it).
    """
    path = Path(path)
    _make_parents(path)
    _sweep_once(path.parent)
    stem = temporary_stem(path.name, name_max=_name_max(path.parent))
    prefix = f".{stem}.cvbench-{HOST_TAG}-{os.getpid()}-"
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=prefix, suffix=f".tmp{Path(stem).suffix}", dir=path.parent
        )
    except OSError as error:  # a read-only or full folder: say so of the file asked for
        raise _naming_destination(error, path) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.is_file():
            with open(tmp_path, "rb") as f:
                os.fsync(f.fileno())
        _publish_mode(tmp_path, replacing=path)
        for key, hook in _BEFORE_REPLACE.get():
            if key == path.absolute():
                hook(tmp_path, path)
        os.replace(tmp_path, path)
    except BaseException as error:
        if tmp_path.is_dir() and not tmp_path.is_symlink():
            shutil.rmtree(tmp_path, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        if isinstance(error, OSError):
            raise _naming_destination(error, path) from None
        raise


#: The bytes a file name may have where `pathconf` cannot say (Linux's NAME_MAX).
NAME_MAX = 255
#: The bytes of an `atomic_path` temporary's name besides the final name's: ".", then
#: ".cvbench-", the host tag, "-", a pid of up to 10 digits, "-", mkstemp's 8 characters,
#: ".tmp" (the suffix is counted with the name).
_TEMPORARY_OVERHEAD = 1 + 9 + 8 + 1 + 10 + 1 + 8 + 4
#: The longest suffix a shortened temporary keeps (writers such as `model.save` check it).
_KEPT_SUFFIX = 16


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return NAME_MAX


def temporary_stem(name: str, *, name_max: int = NAME_MAX) -> str:
    """The final name `name` as an `atomic_path` temporary carries it: whole where the
    temporary's name fits in `name_max` bytes, else its first bytes (dots made `_`), `~`,
    8 hex digits of its SHA-256 and its suffix (up to 16 bytes; a longer one is dropped), so
    that any name the file system takes can be written atomically.

    Example:
        >>> temporary_stem("results.json")
        'results.json'
        >>> long = "r" * 215 + ".json"  # 220 bytes: legal, but its temporary would be 274
        >>> stem = temporary_stem(long)
        >>> stem.startswith("r" * 100) and stem.endswith(".json"), len(stem) + 5 + 42 <= 255
        (True, True)
    """
    raw, suffix = os.fsencode(name), Path(name).suffix
    # the suffix is in the temporary's name twice: with the name, and after ".tmp"
    if len(raw) + len(os.fsencode(suffix)) + _TEMPORARY_OVERHEAD <= name_max:
        return name
    kept = suffix if len(os.fsencode(suffix)) <= _KEPT_SUFFIX else ""
    digest = hashlib.sha256(raw).hexdigest()[:8]
    room = name_max - _TEMPORARY_OVERHEAD - 2 * len(os.fsencode(kept)) - 9  # "~", 8 digits
    # whole characters only: a cut UTF-8 character is a surrogate that TensorFlow's writers
    # (and any UTF-8 encoder) refuse; bytes that are no UTF-8 are left out of the head
    head = raw[: max(room, 1)].decode("utf-8", "ignore").replace(".", "_")
    return f"{head}~{digest}{kept}"


def _make_parents(path: Path) -> None:
    """Creates the folders above `path`; a file where one of them should be is
    `NotADirectoryError` naming that file (`mkdir` said `File exists`, or named the folder
    it could not make)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        above = (path.parent, *path.parent.parents)
        blocking = next((p for p in above if os.path.lexists(p) and not p.is_dir()), None)
        if blocking is None:
            raise
        raise NotADirectoryError(
            errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(blocking)
        ) from None


def _naming_destination(error: OSError, path: Path) -> OSError:
    """`error` naming `path` where it names a temporary of `path` (`atomic_path`), or no
    file at all (a write that found the disk full): the user asked for `path`, and the
    temporary is gone once the error is reported. Other errors as they are."""
    if error.errno is None:
        return error
    named = error.filename
    if named is not None:
        name = os.path.basename(os.fsdecode(named))
        stem = temporary_stem(path.name, name_max=_name_max(path.parent))
        if not name.startswith(f".{stem}.cvbench-"):
            return error
    return type(error)(error.errno, error.strerror, os.fspath(path))


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


#: Absolute destination -> `hook(tmp, path)` that `atomic_path` calls before its rename
#: (`before_replace`).
_BEFORE_REPLACE: contextvars.ContextVar[tuple[tuple[Path, Any], ...]] = contextvars.ContextVar(
    "before_replace", default=()
)


@contextlib.contextmanager
def before_replace(path: str | os.PathLike, hook: Any) -> Iterator[None]:
    """Within the block, an `atomic_path` write of `path` calls `hook(tmp, path)` with its
    complete temporary just before renaming it onto `path`; an error of `hook` fails the
    write (the temporary removed, `path` untouched)."""
    key = Path(path).absolute()
    token = _BEFORE_REPLACE.set((*_BEFORE_REPLACE.get(), (key, hook)))
    try:
        yield
    finally:
        _BEFORE_REPLACE.reset(token)


@contextlib.contextmanager
def when_replaced(path: str | os.PathLike, then: Any) -> Iterator[None]:
    """Calls `then(path)` after the block when the block left a new file at `path` (a new
    inode: `atomic_path`'s rename): also when the block ends by an exception raised right
    after the rename (a signal's KeyboardInterrupt or SystemExit), so that a file in place is
    never left unknown to `then`. An error of `then` on that path does not replace the
    block's exception. A block that wrote nothing there (refused, failed before its rename)
    calls nothing.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "a.txt"
        >>> seen = []
        >>> with when_replaced(target, seen.append), atomic_open(target) as f:
        ...     _ = f.write("x")
        >>> seen == [target]
        True
    """
    path = Path(path)
    before = inode_at(path)
    try:
        yield
    except BaseException:
        if inode_at(path) not in (None, before):
            with contextlib.suppress(Exception):
                then(path)
        raise
    if inode_at(path) not in (None, before):
        then(path)


def inode_at(path: str | os.PathLike) -> int | None:
    """The inode of what is at `path` (a link not followed); None when nothing is."""
    try:
        return os.lstat(path).st_ino
    except OSError:
        return None


def strict_json(obj: Any) -> Any:
    """`obj` as strict JSON can hold it: every non-finite float (NaN, +-inf; NumPy's too)
    as None (`null`), NumPy scalars and arrays as Python numbers and lists, tuples as
    lists. The one rule of cvbench's JSON outputs (`json_text`): RFC 8259 has no NaN,
    and JavaScript, Go and `json.loads(..., parse_constant=...)` refuse Python's `NaN`.

    Example:
        >>> import numpy as np
        >>> strict_json({"loss": float("nan"), "top1": np.float32(0.5), "r": (1, -np.inf)})
        {'loss': None, 'top1': 0.5, 'r': [1, None]}
    """
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return strict_json(obj.tolist())  # a NumPy (or JAX) scalar or array
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_text(obj: Any, **kwargs: Any) -> str:
    """`json.dumps(strict_json(obj), allow_nan=False, **kwargs)`: what every cvbench JSON
    output writes (`write_json_atomic`, the run log's lines), valid JSON whatever it holds.

    Example:
        >>> json_text({"loss": float("inf"), "n": 2}, sort_keys=True)
        '{"loss": null, "n": 2}'
    """
    return json.dumps(strict_json(obj), allow_nan=False, **kwargs)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Writes `obj` as indented JSON to `path` atomically, by `json_text`'s rule (a
    non-finite float as `null`)."""
    encoder = json.JSONEncoder(allow_nan=False, indent=2, sort_keys=True)
    with atomic_open(path, "w", encoding="utf-8") as f:
        for chunk in encoder.iterencode(strict_json(obj)):  # streamed: no whole text in memory
            f.write(chunk)
        f.write("\n")
