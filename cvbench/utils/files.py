"""The one way cvbench touches a user's paths: listing, reading inputs, writing outputs.

Every rule about a user's files is written here once, and every module uses these functions
for the paths a user gives (data folders, images, annotations, checkpoints, model files, the
run folder, outputs):

- **Paths are never patterns.** `match_files(folder, pattern)` lists `folder` as a literal
  path and matches only file *names* against `pattern`; `[`, `*` and `?` in a folder name
  mean themselves (`glob.glob` on `out[12]` would read `out1` and `out2`).
- **Inputs are regular files read with a bound.** `open_input` refuses what is not a regular
  file (a FIFO would block forever, a device such as `/dev/zero` never ends) before reading a
  byte, without blocking on a FIFO (`O_NONBLOCK`); `read_input` also refuses a file over its
  size limit before allocating, and reads at most the limit (a file that grows meanwhile).
- **JSON is bounded in size and depth.** `loads_json` refuses nesting deeper than
  `MAX_JSON_DEPTH` before parsing (Python's parser recurses: `'[' * 100000` would raise
  `RecursionError`), with a vectorized scan that strings cannot fool.
- **Writes never follow a link.** `open_output` opens with `O_NOFOLLOW` (a planted
  `run/train_log.jsonl -> ../victim` is refused, not truncated); `owned_folder` refuses a link
  or a non-folder anywhere between the folder cvbench owns and the file it writes.
- **An output never replaces an input or a file cvbench did not write.** `check_output`
  refuses an output that is, or holds, one of the run's inputs, and replaces an existing file
  only with `overwrite` *and* when `is_ours` says cvbench wrote it (its own marker, never a
  guess from magic bytes).

Each refusal raises `BadFileError` (exit 1 in the `cvbench` command) or `ValueError` (a bad
argument: exit 2), naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import json
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from cvbench.utils.errors import BadFileError
from cvbench.utils.io import HOST_TAG, atomic_open, inode_at, writer_dead

#: The deepest JSON nesting any cvbench reader accepts (COCO annotations need 4, model
#: configurations a few dozen; Python's own parser fails near 1000).
MAX_JSON_DEPTH = 200
#: What each kind of non-regular file is called in a message.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
#: A JSON string (with its escapes), removed before the depth is counted.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: str | os.PathLike, *, what: str = "file") -> os.stat_result:
    """The `stat` of `path` (links followed) when it is a regular file.

    Raises:
        FileNotFoundError: `path` does not exist (a dangling link included).
        BadFileError: `path` is a folder, FIFO, device or socket, named as such.

    Example:
        >>> check_regular("/dev/null", what="image")
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: image /dev/null is a character device, not a regular file
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise BadFileError(f"{what} {os.fspath(path)} is {_kind(st.st_mode)}, not a regular file")
    return st


def open_input(path: str | os.PathLike, *, what: str = "file") -> IO[bytes]:
    """Opens `path` for binary reading once it is known to be a regular file.

    The type is checked twice: first by `stat`, before any open (opening a socket fails with
    "No such device or address", which names no kind; a device may act on being opened), then
    on the opened descriptor (`fstat`), so a file swapped between the check and the open
    cannot slip through; the open itself never blocks (`O_NONBLOCK`: opening a FIFO for
    reading would wait for a writer).

    Raises:
        FileNotFoundError, PermissionError: as `open` would.
        BadFileError: not a regular file.

    Example:
        >>> import socket, tempfile
        >>> sock = Path(tempfile.mkdtemp(), "s")
        >>> with socket.socket(socket.AF_UNIX) as s:
        ...     s.bind(str(sock))
        >>> open_input(sock, what="image")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: image .../s is a socket, not a regular file
    """
    check_regular(path, what=what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadFileError(
                f"{what} {os.fspath(path)} is {_kind(st.st_mode)}, not a regular file"
            )
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: str | os.PathLike, *, limit: int, what: str = "file", flag: str = "") -> bytes:
    """The bytes of the regular file `path`, refused when over `limit` bytes.

    The size is checked from `fstat` before anything is allocated, and at most `limit + 1`
    bytes are read (a file that grows after the check is refused too).

    Args:
        path: the file.
        limit: the largest size accepted, in bytes.
        what: what the file is, for the message ("image", "annotations file", ...).
        flag: the option that raises the limit, named in the message when given.

    Raises:
        BadFileError: not a regular file, or over `limit`.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = Path(d, "a.txt").write_bytes(b"12345")
        >>> read_input(Path(d, "a.txt"), limit=5)
        b'12345'
        >>> read_input(Path(d, "a.txt"), limit=4, what="class list")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: class list .../a.txt has 5 bytes, over the limit of 4...
    """
    with open_input(path, what=what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise _over_limit(path, what, size, limit, flag)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise _over_limit(path, what, len(data), limit, flag)
    return data


def _over_limit(path, what: str, size: int, limit: int, flag: str) -> BadFileError:
    hint = f"; pass {flag} N to raise it" if flag else ""
    return BadFileError(
        f"{what} {os.fspath(path)} has {size} bytes, over the limit of {limit} bytes{hint}"
    )


def json_depth(data: bytes | str) -> int:
    """The deepest nesting of arrays and objects in the JSON text `data` (0 for a scalar),
    counted without parsing: strings are removed first, so brackets inside them do not
    count.

    Example:
        >>> json_depth(b'{"a": [1, {"b": "[[[["}]}')
        3
        >>> json_depth("[" * 5 + "]" * 5)
        5
        >>> json_depth(b'"plain"')
        0
    """
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    raw = _JSON_STRING.sub(b'""', raw)
    codes = np.frombuffer(raw, dtype=np.uint8)
    step = np.zeros(codes.shape, dtype=np.int64)
    step[(codes == ord("[")) | (codes == ord("{"))] = 1
    step[(codes == ord("]")) | (codes == ord("}"))] = -1
    return int(np.cumsum(step).max(initial=0))


def loads_json(data: bytes | str, *, source: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(data)` for text read from `source`, with its nesting bounded.

    Raises:
        BadFileError: naming `source`, when the text is nested deeper than `max_depth`, is
            not UTF-8, or is not valid JSON.

    Example:
        >>> loads_json(b'{"a": [1, 2]}', source="x.json")
        {'a': [1, 2]}
        >>> loads_json(b"[" * 100000, source="x.json")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: x.json: JSON nested 100000 levels deep, over the limit...
        >>> loads_json(b"{", source="x.json")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: x.json is not valid JSON: Expecting ...
    """
    depth = json_depth(data)
    if depth > max_depth:
        raise BadFileError(
            f"{source}: JSON nested {depth} levels deep, over the limit of {max_depth}"
        )
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BadFileError(f"{source} is not valid JSON: {e}") from None


def read_json(
    path: str | os.PathLike, *, limit: int, what: str = "JSON file", flag: str = ""
) -> Any:
    """The decoded JSON of the regular file `path`: `read_input` then `loads_json`."""
    return loads_json(read_input(path, limit=limit, what=what, flag=flag), source=os.fspath(path))


def match_files(folder: str | os.PathLike, pattern: str) -> list[Path]:
    """The regular files in `folder` whose names match the shell pattern `pattern`, sorted.

    `folder` is a literal path: glob characters in it mean themselves. `pattern` may name
    sub-folders (`train/*.tfrecord`); only its last part is a pattern, the parts before it
    are literal too. Links to regular files count; dangling links, folders, FIFOs do not.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp(), "out[12]")
        >>> d.mkdir()
        >>> for name in ("a-1", "a-2", "b-1"):
        ...     _ = (d / name).write_bytes(b"")
        >>> [p.name for p in match_files(d, "a-?")]
        ['a-1', 'a-2']
    """
    root = Path(folder)
    *parents, name_pattern = Path(pattern).parts or ("*",)
    root = root.joinpath(*parents)
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        if fnmatch.fnmatchcase(name, name_pattern):
            path = root / name
            try:
                if stat.S_ISREG(os.stat(path).st_mode):
                    found.append(path)
            except OSError:
                continue
    return sorted(found)


#: A shard of a set: `<prefix>-NNNNN-of-NNNNN` (`build-imagenet`, `build-coco`, TFDS).
SHARD_NAME = re.compile(r"^(?P<prefix>.*)-(?P<index>\d{5})-of-(?P<total>\d{5})$")


def check_shard_set(files: Iterable[str | os.PathLike], *, split: str, folder: Any) -> None:
    """Refuses an incomplete set of shards: each `<prefix>-NNNNN-of-TTTTT` set among `files`
    must hold every index below `TTTTT` (a missing shard would silently train or evaluate
    on less). Files not named so are not checked. Every reader lists a split so
    (`cvbench.data.read.splits.list_split_files`).

    Raises:
        BadFileError: naming the split, the folder and the first missing shards.

    Example:
        >>> check_shard_set(["d/train-00000-of-00002", "d/train-00001-of-00002"],
        ...                 split="train", folder="d")
        >>> check_shard_set(["d/train-00001-of-00003"], split="train", folder="d")
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: the train split in d is incomplete: 2 of its 3 \
shards are missing (train-00000-of-00003, train-00002-of-00003); copy them back or build \
the records again
    """
    sets: dict[tuple[str, int], set[int]] = {}
    for path in files:
        found = SHARD_NAME.match(os.path.basename(os.fspath(path)))
        if found is not None:
            key = (found["prefix"], int(found["total"]))
            sets.setdefault(key, set()).add(int(found["index"]))
    for (prefix, total), indexes in sorted(sets.items()):
        missing = [i for i in range(total) if i not in indexes]
        if missing:
            names = [f"{prefix}-{i:05d}-of-{total:05d}" for i in missing[:3]]
            more = ", ..." if len(missing) > 3 else ""
            raise BadFileError(
                f"the {split} split in {folder} is incomplete: {len(missing)} of its {total} "
                f"shards are missing ({', '.join(names)}{more}); copy them back or build the "
                "records again"
            )


def owned_folder(root: str | os.PathLike, *parts: str, create: bool = True) -> Path:
    """`root / parts...`, a folder cvbench owns and writes into, made where missing.

    Every part below `root` must be a real folder, never a link (a planted
    `run/checkpoints -> /elsewhere` would send cvbench's writes outside the run). `root`
    itself may be a link: the user chose it.

    Raises:
        BadFileError: a part is a link or not a folder.
    """
    path = Path(root)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    for part in parts:
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create:
                return path
            os.mkdir(path)
            continue
        if stat.S_ISLNK(st.st_mode):
            raise BadFileError(
                f"{path} is a symbolic link; cvbench writes only into folders it made, "
                "never through a link: remove it"
            )
        if not stat.S_ISDIR(st.st_mode):
            raise BadFileError(f"{path} is {_kind(st.st_mode)}, where cvbench keeps a folder")
    return path


#: A path that names an open descriptor of a process, not a file: `/dev/stdout`, `/dev/fd/1`,
#: `/proc/self/fd/1` (a pipe, a terminal, or whatever the shell redirected it to).
_DESCRIPTOR_PATH = re.compile(
    r"/dev/(?:stdin|stdout|stderr|fd/\d+)|/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd/\d+"
)


def _descriptor_path(path: str | os.PathLike) -> str | None:
    """The descriptor path (`/dev/stdout`, `/proc/self/fd/1`, ...) that `path` is, or that
    the links at `path` lead through (each followed by one `readlink`), else None."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on a chain of links
        if _DESCRIPTOR_PATH.fullmatch(current):
            return current
        try:
            target = os.readlink(current)
        except (OSError, ValueError):
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    return None


def _refuse_stream(path: str | os.PathLike, flag: str) -> None:
    """Refuses an output that is no path to write: `-`, a standard stream or descriptor
    (`/dev/stdout`), an existing FIFO, device or socket (`user_output`).

    Raises:
        ValueError: naming the flag, the path and why (exit 2 in the command).
    """
    text, name = os.fspath(path), flag or "the output"
    why = (
        f"cvbench writes {name} atomically to the file or folder it names (a command's report "
        "is on standard output already)"
    )
    if text == "-":
        raise ValueError(
            f"{name} -: '-' is not standard output here: {why}; name a path (./- for one called -)"
        )
    stream = _descriptor_path(text)
    if stream is not None:
        seen = "" if stream == os.path.abspath(text) else f" (through {stream})"
        raise ValueError(
            f"{name} {text} is an open descriptor of a process{seen}, not a file: {why}; "
            "name a file"
        )
    try:
        mode = os.stat(text).st_mode
    except (OSError, ValueError):
        return  # missing, dangling: the command makes it, or refuses it naming it
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ValueError(f"{name} {text} is {_kind(mode)}, not a file or folder: {why}")


def user_output(path: Any, *, flag: str = "") -> Any:
    """The output path a user named (a command's `--log-dir`, `--json`, `--output`, ...),
    resolved once when it is itself a symbolic link to something that exists; any other
    path as it is, of the same type. The one rule for links and outputs: the path the user
    names may be a link (the user chose it) and the command then writes to, checks, and
    prints its target; a link found inside an output (a planted `run/checkpoints -> ...`)
    is never followed nor written through (`owned_folder`, `open_output`, `check_output`).
    A dangling link is left as it is: the command refuses it, naming it.

    No output is a stream: `-`, `/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N` (and a link to
    one), and an existing FIFO, device or socket are refused, naming `flag` (the option:
    `--json`), since every output is written atomically (a temporary renamed over it) and
    recorded as cvbench's; a command prints its report on standard output already, and `-`
    would leave a file named `-`. `./-` names a file called `-`.

    Raises:
        ValueError: an output that is a stream (exit 2 in the command).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "real").mkdir()
        >>> (d / "out").symlink_to("real")
        >>> user_output(str(d / "out")) == str((d / "real").resolve())
        True
        >>> user_output(d / "plain") == d / "plain"
        True
        >>> user_output("-", flag="--json")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: --json -: '-' is not standard output here: cvbench writes --json ...
    """
    if path is None or isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        return path
    _refuse_stream(path, flag)
    try:
        is_link = stat.S_ISLNK(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return path
    if not is_link or not os.path.exists(path):
        return path
    resolved = os.path.realpath(path)
    return resolved if isinstance(path, str) else Path(resolved)


def refuse_link(path: str | os.PathLike) -> None:
    """Raises `BadFileError` when `path` is a symbolic link (cvbench writes no file through
    one); nothing when it is anything else or missing."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise BadFileError(
            f"{os.fspath(path)} is a symbolic link; cvbench never writes through a link: "
            "remove it or choose another path"
        )


def open_output(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> IO:
    """Opens a file cvbench writes in place (a log it appends to, a lock it truncates),
    never through a symbolic link (`O_NOFOLLOW`).

    Args:
        path: the file.
        mode: "w", "wb" (truncate), "a", "ab" (append), "r+", "r+b" (read and write, made
            when missing).
        **kwargs: passed to `os.fdopen` (for example `encoding`).

    Raises:
        BadFileError: `path` is a symbolic link, or not a regular file.
    """
    base = {"w": os.O_WRONLY | os.O_TRUNC, "a": os.O_WRONLY | os.O_APPEND, "r+": os.O_RDWR}
    key = mode.replace("b", "")
    if key not in base:
        raise ValueError(f"open_output mode must be w, a or r+ (with b), got {mode!r}")
    flags = base[key] | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            refuse_link(path)
        if e.errno == errno.ENXIO:  # a FIFO without a reader, a device without its driver
            raise BadFileError(
                f"{os.fspath(path)} is {_kind(os.stat(path).st_mode)}, where cvbench writes a file"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadFileError(
                f"{os.fspath(path)} is {_kind(st.st_mode)}, where cvbench writes a file"
            )
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def _same_or_inside(path: Path, other: Path) -> bool:
    """Whether `other` is `path` (the same file, links resolved) or lies inside it."""
    try:
        if path.exists() and other.exists() and os.path.samefile(path, other):
            return True
    except OSError:
        pass
    real, other_real = path.resolve(), other.resolve()
    return other_real == real or real in other_real.parents


def check_output(
    path: str | os.PathLike,
    *,
    inputs: Iterable[str | os.PathLike] = (),
    overwrite: bool = False,
    is_ours: Callable[[Path], bool] | None = None,
    flag: str = "--overwrite",
) -> Path:
    """Checks, before any work, that cvbench may write `path`; returns it as a `Path`.

    - `path` may not be, or hold, one of `inputs` (the checkpoint, model or annotations the
      command reads), with or without `overwrite`;
    - `path` may not be a symbolic link;
    - an existing `path` is replaced only with `overwrite`, and, when `is_ours` is given, only
      if `is_ours(path)` says cvbench wrote it.

    Raises:
        ValueError: naming the path and what to do instead (exit 2 in the command).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "ckpt.npz").write_bytes(b"x")
        >>> check_output(d / "ckpt.npz", inputs=[d / "ckpt.npz"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: .../ckpt.npz is an input of this command (.../ckpt.npz); it is never...
    """
    out = Path(path)
    if os.fspath(path) == "":
        raise ValueError("the output path is empty: name a file or folder")
    for source in inputs:
        source = Path(source)
        if _same_or_inside(out, source):
            raise ValueError(
                f"{out} is an input of this command ({source}); it is never overwritten: "
                "write elsewhere"
            )
    if out.is_symlink():
        raise ValueError(
            f"{out} is a symbolic link; cvbench never writes through a link: remove it or "
            "write elsewhere"
        )
    if out.exists():
        if not overwrite:
            raise ValueError(f"{out} exists; pass {flag} to replace it")
        if is_ours is not None and not is_ours(out):
            raise ValueError(
                f"{out} exists and was not written by cvbench; {flag} replaces only cvbench's "
                "own outputs: move it or write elsewhere"
            )
    return out


#: The list, in each folder cvbench writes single files into, of the files it wrote there
#: (name -> size and SHA-256): the marker by which `--overwrite` knows its own outputs. It
#: holds a base, one JSON object (all that an older cvbench wrote), then one JSON line
#: `[name, entry]` per record since (entry null: removed), each appended under an exclusive
#: `flock` by one write and an fsync; readers replay the lines over the base (a torn or
#: damaged line is passed over, a damaged base claims nothing). Once the lines outgrow the
#: base, a recorder rewrites the list as one base, so that recording n files into a folder
#: writes O(n) bytes in all, where rewriting the whole list per record wrote O(n^2).
OUTPUTS_LIST = ".cvbench-outputs.json"
#: Bytes of a list read whatever its folder holds (about 100,000 entries); beyond it, a list
#: may have `_LIST_PER_FILE` bytes per entry of its folder (a base entry and lines of it).
_LIST_FLOOR = 16 << 20
_LIST_PER_FILE = 4 << 10
#: The longest record line read: a 255-byte name of undecodable bytes (`\udcXX` each), an
#: entry; a longer line is damaged.
_LINE_LIMIT = 8 << 10
#: Bytes of appended lines that never cause a rewrite (a small folder's list stays lines).
_JOURNAL_FLOOR = 64 << 10
#: Bytes before the replayed end that must be unchanged for a list to be replayed onward.
_TAIL = 64
#: Folders whose replayed list a process keeps (`_load`).
_CACHED_FOLDERS = 64
#: Lists a recorder locks in turn, each rewritten by another while it waited, before failing.
_RELOCKS = 1000
_OLD_BASE_END = re.compile(rb"^\}[ \t\r]*(\n|\Z)", re.MULTILINE)


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open_input(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Listing:
    """A folder's list replayed up to `consumed` bytes, the end of its last complete line:
    the file it came from (`key`: device, inode, size, mtime), the `tail` bytes before
    `consumed`, the base's size, the read limit it was checked against, the entries; a
    `damaged` list (its base unreadable, or over its limit) claims nothing."""

    __slots__ = ("key", "consumed", "tail", "base", "limit", "entries", "damaged")

    def __init__(self, key: tuple, limit: int) -> None:
        self.key, self.limit = key, limit
        self.consumed, self.tail, self.base = 0, b"", 0
        self.entries: dict[str, Any] = {}
        self.damaged = False


_CACHE: dict[str, _Listing] = {}
_CACHE_LOCK = threading.Lock()


def _forget_lists() -> None:
    """Forgets the lists this process replayed (a forked child starts afresh)."""
    global _CACHE_LOCK
    _CACHE.clear()
    _CACHE_LOCK = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_lists)


def _stat_key(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_span(fd: int, start: int, end: int) -> bytes:
    """Bytes `start` to `end` of the open file `fd` (fewer where it ends sooner)."""
    chunks, at = [], start
    while at < end:
        chunk = os.pread(fd, min(end - at, 1 << 24), at)
        if not chunk:
            break
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)


def _list_limit(folder: Path, size: int) -> int:
    """The most bytes `folder`'s list may have: `_LIST_FLOOR`, and beyond it (counted only
    then) `_LIST_PER_FILE` per entry of the folder."""
    if size <= _LIST_FLOOR:
        return _LIST_FLOOR
    try:
        with os.scandir(folder) as entries:
            return _LIST_FLOOR + _LIST_PER_FILE * sum(1 for _ in entries)
    except OSError:
        return _LIST_FLOOR  # a folder that cannot be listed: no more than the floor


def _parse_base(data: bytes) -> tuple[dict[str, Any] | None, int]:
    """The base object a list's text `data` starts with, and the bytes it spans: on the
    first line (this cvbench's), or up to the first line `}` (an older cvbench's indented
    JSON); `({}, 0)` when it starts with record lines; `(None, ...)` when it is damaged."""
    start = len(data) - len(data.lstrip())
    if data[start : start + 1] != b"{":
        return {}, 0
    for end in _base_ends(data, start):
        with contextlib.suppress(BadFileError):
            base = loads_json(data[:end], source=OUTPUTS_LIST)
            return (base, end) if isinstance(base, dict) else (None, end)
    return None, len(data)


def _base_ends(data: bytes, start: int) -> Iterator[int]:
    """Where a base starting at `start` may end: its first line, else (searched only then)
    the first line `}`."""
    yield data.find(b"\n", start) + 1 or len(data)
    match = _OLD_BASE_END.search(data, start)
    if match:
        yield match.end()


def _replay_lines(data: bytes, entries: dict[str, Any]) -> int:
    """Applies the complete record lines of `data` to `entries`, in order; returns the bytes
    up to the end of the last one. A damaged line (torn by a kill, not a record) is passed
    over: every entry claims only a file of its SHA-256, so one left standing claims nothing
    cvbench did not write."""
    end = data.rfind(b"\n") + 1
    for line in data[:end].split(b"\n"):
        if not line.strip() or len(line) > _LINE_LIMIT:
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, list) and len(record) == 2 and isinstance(record[0], str):
            if record[1] is None:
                entries.pop(record[0], None)
            else:
                entries[record[0]] = record[1]
    return end


def _replay_all(folder: Path, fd: int, st: os.stat_result) -> _Listing:
    """The list open as `fd` read whole (within its limit) and replayed."""
    state = _Listing(_stat_key(st), _list_limit(folder, st.st_size))
    if st.st_size > state.limit:
        state.damaged = True
        return state
    data = _read_span(fd, 0, st.st_size)
    base, state.base = _parse_base(data)
    if base is None:
        state.damaged = True
        return state
    state.entries = base
    state.consumed = state.base + _replay_lines(data[state.base :], base)
    state.tail = data[max(0, state.consumed - _TAIL) : state.consumed]
    return state


def _replay_onward(folder: Path, fd: int, st: os.stat_result, state: _Listing) -> bool:
    """Replays the lines appended to `state`'s file since it was read, in place; False when
    the list open as `fd` is not that file grown (rewritten, truncated, damaged)."""
    if state.damaged or state.consumed == 0 or state.key[:2] != _stat_key(st)[:2]:
        return False
    if st.st_size < state.consumed:
        return False
    if _read_span(fd, state.consumed - len(state.tail), state.consumed) != state.tail:
        return False  # the same inode number, but another file (or edited in place)
    if st.st_size > state.limit:
        state.limit = _list_limit(folder, st.st_size)
        if st.st_size > state.limit:
            return False
    data = _read_span(fd, state.consumed, st.st_size)
    used = _replay_lines(data, state.entries)
    state.consumed += used
    state.tail = (state.tail + data[:used])[-_TAIL:]
    state.key = _stat_key(st)
    return True


def _load(folder: Path, fd: int, st: os.stat_result) -> _Listing:
    """`folder`'s list, open as `fd`, replayed: from this process's last reading of it where
    the file only grew since (each record is read once), else whole."""
    key = os.path.abspath(folder)
    with _CACHE_LOCK:
        state = _CACHE.pop(key, None)
        if state is None or (
            state.key != _stat_key(st) and not _replay_onward(folder, fd, st, state)
        ):
            state = _replay_all(folder, fd, st)
        _CACHE[key] = state  # the most recent last
        while len(_CACHE) > _CACHED_FOLDERS:
            del _CACHE[next(iter(_CACHE))]
        return state


def _read_outputs_list(folder: Path) -> dict[str, Any]:
    """`folder`'s entries (name -> size and SHA-256; not to be changed); empty when it has
    no list or a damaged one (a damaged list claims nothing: every file is the user's)."""
    try:
        f = open_input(folder / OUTPUTS_LIST, what="output list")
    except (FileNotFoundError, NotADirectoryError, BadFileError):
        return {}
    with f:
        state = _load(folder, f.fileno(), os.fstat(f.fileno()))
    return {} if state.damaged else state.entries


def record_output(path: str | os.PathLike) -> None:
    """Records the file `path`, just written by cvbench, in its folder's `OUTPUTS_LIST`, so
    that a later `--overwrite` may replace it (`written_by_cvbench`)."""
    path = Path(path)
    _record(path, size=path.stat().st_size, sha256=_sha256(path))


def record_tree(folder: str | os.PathLike) -> None:
    """Records every file under `folder`, just written by cvbench, in the `OUTPUTS_LIST` of
    its own folder (`record_output`): a folder renamed into place whole (an export) is
    recorded in its staging place, before the rename."""
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            if name != OUTPUTS_LIST:
                record_output(Path(root, name))


def _record(path: Path, *, size: int, sha256: str) -> Any:
    """Lists `path` in its folder's `OUTPUTS_LIST` with this size and SHA-256; returns the
    entry it replaced (None: none)."""
    return _set_entry(path, {"size": size, "sha256": sha256})


def _set_entry(path: Path, entry: Any) -> Any:
    """Sets `path`'s entry in its folder's `OUTPUTS_LIST` (None: removes it), durably before
    it returns; returns the entry it replaced (None: none).

    The list is locked (`flock`) while the line is appended, or while it is rewritten whole
    once its lines outgrow its base (or its base is damaged): a recorder that waited for a
    rewrite's lock finds another file at the list's name and locks that one, so no record of
    a concurrent process is lost. An entry the list holds already is not written again. A
    link in the list's place is refused (`open_output`)."""
    listing = path.parent / OUTPUTS_LIST
    line = json.dumps([path.name, entry], sort_keys=True, separators=(",", ":")) + "\n"
    for _ in range(_RELOCKS):
        refuse_link(listing)
        f, writable = _open_list(listing)
        with f:
            fd = f.fileno()
            _lock(fd)
            st = os.fstat(fd)
            if inode_at(listing) != st.st_ino:
                continue  # rewritten (or removed) while this process waited for its lock
            state = _load(path.parent, fd, st)
            previous = None if state.damaged else state.entries.get(path.name)
            if not state.damaged and previous == entry:
                return previous  # recorded so already (a rerun writing the same bytes)
            grown = st.st_size - state.base + len(line) > max(state.base, _JOURNAL_FLOOR)
            if grown or state.damaged or not writable:
                entries = {} if state.damaged else dict(state.entries)
                _replay_lines(line.encode("ascii"), entries)
                _rewrite_list(listing, entries)
            else:
                torn = st.st_size > 0 and _read_span(fd, st.st_size - 1, st.st_size) != b"\n"
                try:
                    _append_line(fd, ("\n" if torn else "") + line)
                except OSError:
                    if st.st_size == 0:  # a list this record made: a full disk leaves none
                        _remove_if_empty(listing, fd)
                    raise
            return previous
    raise BadFileError(f"{listing} was replaced {_RELOCKS} times while cvbench waited to record")


def _remove_if_empty(listing: Path, fd: int) -> None:
    """Removes the list open (and locked) as `fd` when it is still at `listing` and empty:
    an empty list claims nothing, and a record that failed on a full disk leaves no file
    behind (as the whole-list rewrite of an older cvbench did not)."""
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        if st.st_size == 0 and inode_at(listing) == st.st_ino:
            os.unlink(listing)


def _open_list(listing: Path) -> tuple[IO[bytes], bool]:
    """The list at `listing` open to read and append (made when missing), and True; where
    it may not be written in place (a read-only list in a folder cvbench may write), open to
    read, and False: it is then rewritten whole, by a rename, as an older cvbench did."""
    try:
        f = open_output(listing, "r+b", buffering=0)  # read too: its replay
    except PermissionError as error:
        try:
            return open_input(listing, what="output list"), False
        except FileNotFoundError:
            raise error from None
    try:
        fd = f.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
    except BaseException:
        f.close()
        raise
    return f, True


def _lock(fd: int) -> None:
    """Locks the list open as `fd` for this recorder (`flock`); a file system that has no
    locks leaves it unlocked, as an older cvbench always did."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as error:
        if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def _append_line(fd: int, line: str) -> None:
    """Appends `line` to the list open as `fd` with one write, then fsyncs it; a short write
    (a full disk) raises, and the next record starts on a line of its own."""
    data = line.encode("ascii")
    if os.write(fd, data) != len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    os.fsync(fd)


def _rewrite_list(listing: Path, entries: dict[str, Any]) -> None:
    """Replaces the list at `listing` by one base holding `entries` (`atomic_open`)."""
    text = json.dumps(entries, sort_keys=True, separators=(",", ":")) + "\n"
    with atomic_open(listing, "w", encoding="ascii") as f:
        f.write(text)


@contextlib.contextmanager
def recording(
    path: str | os.PathLike, *, staged: str | os.PathLike | None = None
) -> Iterator[None]:
    """Records the file the block writes at `path` as cvbench's (`record_output`), so that
    every file a command leaves is one a rerun with `--overwrite` may replace. Every writer
    of a recorded output uses it:

        with recording(out):
            write_json_atomic(out, results)

    The record comes before the rename: of an `atomic_path` write (`io.before_replace`:
    the temporary's size and SHA-256 under the final name), or of `staged`, the complete
    file a writer renames into place itself (an export's swap). A full disk that stops the
    record stops the write too, leaving the old file, and a signal after the rename finds
    the new one recorded; a block that fails before its rename gives the old file its entry
    back. Any other writer is recorded once the block leaves a new file there
    (`io.when_replaced`, also when a signal stops it right after its rename).
    """
    from cvbench.utils.io import before_replace, when_replaced

    path = Path(path)
    before = inode_at(path)
    recorded: list[Any] = []  # the entry each record before a rename replaced

    def record_file(source: Path, final: Path) -> None:
        recorded.append(_record(final, size=source.stat().st_size, sha256=_sha256(source)))

    def record_in_place(final: Path) -> None:
        if not recorded:
            record_output(final)

    try:
        with when_replaced(path, record_in_place), before_replace(path, record_file):
            if staged is not None:
                record_file(Path(staged), path)
            yield
    except BaseException:
        if recorded and inode_at(path) == before:  # recorded, but the new file never came
            with contextlib.suppress(Exception):
                _set_entry(path, recorded[0])
        raise


def written_by_cvbench(path: str | os.PathLike) -> bool:
    """Whether the regular file `path` is one cvbench wrote and nobody changed since: named
    in its folder's `OUTPUTS_LIST` with the same size and SHA-256.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "r.json").write_text("[]")
        >>> written_by_cvbench(d / "r.json")
        False
        >>> record_output(d / "r.json")
        >>> written_by_cvbench(d / "r.json")
        True
        >>> _ = (d / "r.json").write_text("[1]")  # changed by the user since
        >>> written_by_cvbench(d / "r.json")
        False
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    entry = _read_outputs_list(path.parent).get(path.name)
    if not isinstance(entry, dict) or entry.get("size") != st.st_size:
        return False
    try:
        return entry.get("sha256") == _sha256(path)
    except (OSError, BadFileError):
        return False


def staging_folder(folder: str | os.PathLike, prefix: str) -> Path:
    """A new private folder `<folder>/<prefix><host>-<pid>-<random>` (`io.HOST_TAG`) in which
    a command builds an output before moving it into place; `remove_dead_staging` removes the
    ones whose process was killed outright (a SIGKILL runs no `finally`)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"{prefix}{HOST_TAG}-{os.getpid()}-", dir=folder))


def remove_dead_staging(folder: str | os.PathLike, prefix: str) -> list[Path]:
    """Removes the staging folders `<folder>/<prefix><host>-<pid>-...` (`staging_folder`)
    whose writer ran here and no longer runs (`io.writer_dead`); returns them. A running
    process's folder, another machine's or container's (a shared file system), a link and a
    file of that name are left alone.

    Example:
        >>> import tempfile
        >>> from cvbench.utils.io import HOST_TAG
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / f".export-{HOST_TAG}-999999999-x").mkdir()  # no such process here
        >>> (d / ".export-00000000-999999999-x").mkdir()  # another machine's (if not ours)
        >>> mine = staging_folder(d, ".export-")
        >>> removed = [p.name for p in remove_dead_staging(d, ".export-")]
        >>> removed == [f".export-{HOST_TAG}-999999999-x"] or HOST_TAG == "00000000", mine.is_dir()
        (True, True)
    """
    import shutil

    folder = Path(folder)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    removed = []
    for name in names:
        if not name.startswith(prefix):
            continue
        host, _, rest = name[len(prefix) :].partition("-")
        path = folder / name
        dead = writer_dead(host, rest.split("-", 1)[0])
        if dead and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def tree_written_by_cvbench(folder: str | os.PathLike) -> bool:
    """Whether the folder `folder` holds only real folders and files cvbench wrote there and
    nobody changed since (`record_tree`, `written_by_cvbench`); a link, another kind of file
    or a file of anyone else's makes it not cvbench's.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "sub").mkdir()
        >>> _ = (d / "sub" / "a.pb").write_bytes(b"x")
        >>> tree_written_by_cvbench(d)
        False
        >>> record_tree(d)
        >>> tree_written_by_cvbench(d)
        True
        >>> _ = (d / "notes.txt").write_text("mine")
        >>> tree_written_by_cvbench(d)
        False
    """
    if os.path.islink(folder) or not os.path.isdir(folder):
        return False
    for root, dirs, names in os.walk(folder):
        if any(os.path.islink(os.path.join(root, name)) for name in dirs):
            return False
        for name in names:
            path = Path(root, name)
            if name == OUTPUTS_LIST and stat.S_ISREG(os.lstat(path).st_mode):
                continue
            if not written_by_cvbench(path):
                return False
    return True
