"""The run directory (`log_dir`) of one training run: one run at a time, and one run per folder.

A fresh run (not a resume) into a folder that already holds a run (checkpoints,
`train_log.jsonl`, `export/`) would overwrite that run's checkpoints of the same steps, prune
its own and leave a mix that a later resume loads from; it is refused before anything is
written. A folder that does not exist, is empty or holds only other files is fine.

While a run trains, rank 0 holds an exclusive `fcntl.flock` on `<log_dir>/.cvbench-run.lock`,
which records who holds it (pid, host, start time). A second run into the same folder finds
it taken and stops at once, naming the holder, without touching anything; the kernel releases
the lock when the holder ends, even when it is killed, so a lock never has to be removed by
hand. The lock file stays (a later run takes it again); it does not count as a run.
`cvbench train` holds it from its start to its `results.json`, the final evaluation
included (`RunDirectory` counts nested holds), and `cvbench eval --log-dir` refuses a folder
whose lock is held (`run_holder`) or that holds a training run.

A run folder's `results.json` is the training's (`training_results`): a run refuses, at
its start, a folder whose `results.json` is another's (an evaluation's, a user's file:
`foreign_results`), and the run's end never replaces one that appeared meanwhile.

Nothing in the folder is followed through a symbolic link: the lock file is opened with
`O_NOFOLLOW`, and an entry the run writes (`checkpoints/`, `train_log.jsonl`, `export/`,
`tensorboard/`, `results.json`, `plots/`, the lock) that is a link is refused before
anything is written (`cvbench.utils.files.owned_folder`, `refuse_link`): a planted
`run/.cvbench-run.lock -> ../victim` would otherwise be truncated. The folder itself may be a
link the user chose, but not a dangling one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from cvbench.utils.errors import BadFileError, CvbenchError
from cvbench.utils.files import owned_folder, read_json, refuse_link, written_by_cvbench


@dataclass(frozen=True)
class RunFolder:
    """The layout of a run folder (`log_dir`): the one place that names what a run writes
    where, so that the Trainer, the task layer, the commands and the demo agree.

    The class attributes are the entries' names, the properties their paths under `root`.

    Example:
        >>> folder = RunFolder("run")
        >>> str(folder.checkpoints), str(folder.log), str(folder.export)
        ('run/checkpoints', 'run/train_log.jsonl', 'run/export')
        >>> str(folder.tensorboard), str(folder.results), str(folder.lock)
        ('run/tensorboard', 'run/results.json', 'run/.cvbench-run.lock')
    """

    root: Path
    #: The checkpoints (`ckpt-<step>.npz`).
    CHECKPOINTS: ClassVar[str] = "checkpoints"
    #: The JSON-lines run log.
    LOG: ClassVar[str] = "train_log.jsonl"
    #: The exported model files.
    EXPORT: ClassVar[str] = "export"
    #: TensorBoard's event files.
    TENSORBOARD: ClassVar[str] = "tensorboard"
    #: The final results (`cvbench.tasks.runner.TaskRun.write_results`).
    RESULTS: ClassVar[str] = "results.json"
    #: The run's PNG plots (`cvbench train`).
    PLOTS: ClassVar[str] = "plots"
    #: The lock file rank 0 holds while the run trains.
    LOCK: ClassVar[str] = ".cvbench-run.lock"

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def checkpoints(self) -> Path:
        """`root/checkpoints`."""
        return self.root / self.CHECKPOINTS

    @property
    def log(self) -> Path:
        """`root/train_log.jsonl`."""
        return self.root / self.LOG

    @property
    def export(self) -> Path:
        """`root/export`."""
        return self.root / self.EXPORT

    @property
    def tensorboard(self) -> Path:
        """`root/tensorboard`."""
        return self.root / self.TENSORBOARD

    @property
    def results(self) -> Path:
        """`root/results.json`."""
        return self.root / self.RESULTS

    @property
    def plots(self) -> Path:
        """`root/plots`."""
        return self.root / self.PLOTS

    @property
    def lock(self) -> Path:
        """`root/.cvbench-run.lock`."""
        return self.root / self.LOCK


#: The lock file of a run directory.
LOCK_NAME = RunFolder.LOCK
#: What a run writes into its directory, and the kind each must be: "dir" or "file".
RUN_ENTRIES = {RunFolder.CHECKPOINTS: "dir", RunFolder.LOG: "file", RunFolder.EXPORT: "dir"}
#: Other entries the Trainer writes, whose kind is checked but which do not make a run.
_OTHER_ENTRIES = {
    RunFolder.TENSORBOARD: "dir",
    RunFolder.LOCK: "file",
    RunFolder.RESULTS: "file",
    RunFolder.PLOTS: "dir",
}
#: The lock file's record of the holder is read up to this size.
_HOLDER_LIMIT = 4096
#: A `results.json` is read up to this size (to tell whose it is; `recorded_metrics` too).
RESULTS_READ_LIMIT = 16 << 20
#: The key only a training's `results.json` holds (`cvbench.tasks.runner.results_record`).
TRAINING_RESULTS_KEY = "plan"


class RunDirInUseError(CvbenchError, OSError):
    """The run directory is locked by another training run (`errno` EBUSY); the message names
    the directory and the holder. Nothing in the directory was changed."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EBUSY, message)

    def __str__(self) -> str:
        return self.strerror


def existing_run(log_dir: str | os.PathLike) -> list[str]:
    """What `log_dir` holds of an earlier run: "checkpoints/ckpt-0000000002.npz" (the newest
    checkpoint file), "train_log.jsonl", "export/"; empty for a folder without a run.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "notes.txt").write_text("mine")
        >>> existing_run(d)
        []
        >>> _ = (d / "train_log.jsonl").write_text("{}")
        >>> existing_run(d)
        ['train_log.jsonl']
    """
    folder = RunFolder(log_dir)
    found = []
    if folder.checkpoints.is_dir():
        files = sorted(p.name for p in folder.checkpoints.iterdir() if p.name.startswith("ckpt-"))
        if files:
            found.append(f"{folder.CHECKPOINTS}/{files[-1]}")
    if folder.log.exists():
        found.append(folder.LOG)
    if folder.export.exists():
        found.append(f"{folder.EXPORT}/")
    return found


def check_fresh_run(log_dir: str | os.PathLike) -> None:
    """Refuses a fresh run into a folder that holds a run already.

    Raises:
        ValueError: naming the folder, what is in it, and the two ways out.
    """
    found = existing_run(log_dir)
    if found:
        raise ValueError(
            f"{log_dir} already holds a run ({', '.join(found)}): rerun with resume=True to "
            "continue it, or train in another log directory"
        )


def training_results(path: str | os.PathLike) -> bool:
    """Whether the file `path` is a training's `results.json`: written by cvbench and
    unchanged since (`written_by_cvbench`), and a JSON object holding the run's plan
    (`TRAINING_RESULTS_KEY`; an evaluation's holds none)."""
    return written_by_cvbench(path) and _holds_a_plan(path)


def _holds_a_plan(path: str | os.PathLike) -> bool:
    try:
        record = read_json(path, limit=RESULTS_READ_LIMIT, what="results file")
    except (OSError, BadFileError):
        return False
    return isinstance(record, dict) and TRAINING_RESULTS_KEY in record


def foreign_results(log_dir: str | os.PathLike) -> str | None:
    """Why `log_dir/results.json` is not a training's (`training_results`), which a run
    would replace at its end: "an evaluation's results" or "not written by cvbench"; None
    when it is a training's or there is none. An older cvbench's training recorded none of
    its results: an unrecorded one holding a plan beside the run's `train_log.jsonl` is that
    run's (a resume of it goes on)."""
    path = RunFolder(log_dir).results
    if not os.path.lexists(path) or training_results(path):
        return None
    older = not written_by_cvbench(path) and RunFolder(log_dir).log.is_file()
    if older and _holds_a_plan(path):
        return None
    if written_by_cvbench(path):
        return "another command's results, written by cvbench"
    return "it was not written by cvbench"


def check_results_file(log_dir: str | os.PathLike) -> None:
    """Refuses a run into a folder whose `results.json` is not a training's
    (`foreign_results`): the run's end would replace it.

    Raises:
        ValueError: naming the file and why (exit 2 in the command).
    """
    why = foreign_results(log_dir)
    if why is not None:
        raise ValueError(
            f"{RunFolder(log_dir).results} is not a training's results file ({why}): the "
            "run would replace it at its end; move it, or train in another log directory"
        )


def run_holder(log_dir: str | os.PathLike) -> str | None:
    """Who holds `log_dir`'s run lock now ("pid 12 on host h since ..."), or None: no lock
    file, or one no live process holds. Nothing is created or changed."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(RunFolder(log_dir).lock, flags)
    except OSError:
        return None  # none (or a link, a folder: the layout checks refuse those)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(fd)
    except OSError:
        return None  # a file system without locks: as `_open_locked`, nothing to learn
    finally:
        os.close(fd)  # also lets a shared lock taken here go
    return None


def check_layout(log_dir: str | os.PathLike) -> None:
    """Checks that `log_dir` is a folder (or absent) and that the entries a run writes in it
    are of the kind the run writes (a folder `checkpoints/`, a file `train_log.jsonl`, ...).

    Raises:
        NotADirectoryError: `log_dir`, or an entry that must be a folder, is something else.
        IsADirectoryError: an entry that must be a file is a folder.
        BadFileError: `log_dir` is a dangling symbolic link, or an entry is a symbolic link
            (the run never writes through one).
    """
    log_dir = Path(log_dir)
    if log_dir.is_symlink() and not log_dir.exists():
        raise BadFileError(
            f"{log_dir} is a symbolic link to {os.readlink(log_dir)}, which does not exist: "
            "create its target or train in another log directory"
        )
    if log_dir.exists() and not log_dir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory (the run's log dir)", log_dir)
    for name, kind in {**RUN_ENTRIES, **_OTHER_ENTRIES}.items():
        path = log_dir / name
        if kind == "dir" and path.is_symlink():
            owned_folder(log_dir, name, create=False)  # refuses the link, naming it
        refuse_link(path)
        if not path.exists():
            continue
        if kind == "dir" and not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory (the run writes one)", path)
        if kind == "file" and path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "a directory (the run writes a file)", path)


class RunDirectory:
    """Rank 0's claim on a run directory: `acquire` checks it and takes its lock, `release`
    lets it go (also done by the kernel when the process ends).

    Args:
        log_dir: the run directory.
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        self.log_dir = Path(log_dir)
        self._fd: int | None = None
        self._holds = 0  # acquires not yet released: the lock goes with the last release

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self, *, fresh: bool) -> None:
        """Takes the directory for a run: checks its layout, takes the lock, and for a fresh
        run (`fresh=True`, not a resume) refuses a folder that holds a run already, and any
        run a folder whose `results.json` is not a training's (`check_results_file`). A
        refusal changes nothing in the folder; the folder and the lock file are created only
        when the run may go ahead. Acquiring a held directory holds it once more: the lock
        goes with the matching `release` (a command holds it around the Trainer's `fit`).

        Raises:
            RunDirInUseError: another run holds the lock.
            ValueError: a fresh run into a folder holding a run (`check_fresh_run`).
            OSError: the folder cannot be used (not a folder, read-only, ...), naming the path.
        """
        if self.held:
            self._holds += 1
            return
        check_layout(self.log_dir)
        lock = RunFolder(self.log_dir).lock
        fd = _open_locked(lock, create=False)  # an existing lock file: no write before the lock
        try:
            if fresh:
                check_fresh_run(self.log_dir)
            check_results_file(self.log_dir)
            if fd is None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                fd = _open_locked(lock, create=True)
                if fresh:  # another run may have started between the check and the lock
                    check_fresh_run(self.log_dir)
            _write_holder(fd)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        self._fd, self._holds = fd, 1

    def claim(self, distribution: Any, *, fresh: bool) -> None:
        """`acquire` on rank 0 of `distribution` (a `cvbench.training.distributed.Distribution`),
        with its refusal raised on every rank (a collective: every rank calls it).

        Raises:
            The errors of `acquire`, on every rank.
        """
        refusal = None
        if distribution.is_chief:
            try:
                self.acquire(fresh=fresh)
            except (OSError, ValueError) as e:
                refusal = e
        told = distribution.broadcast_object(None if refusal is None else _portable(refusal))
        if refusal is not None:
            raise refusal
        if told is not None:
            raise _rebuilt(told)

    def release(self) -> None:
        """Ends one hold (`acquire`); the last one lets the lock go (the lock file stays)."""
        self._holds = max(0, self._holds - 1)
        if self._fd is not None and self._holds == 0:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor releases the flock


def _portable(error: OSError | ValueError) -> tuple:
    """What other ranks need to raise the same error as rank 0 (sent pickled)."""
    if isinstance(error, RunDirInUseError):
        return ("in_use", str(error))
    if isinstance(error, BadFileError):
        return ("bad_file", str(error))
    if isinstance(error, OSError):
        return ("os", error.errno, error.strerror, error.filename)
    return ("value", str(error))


def _rebuilt(told: tuple) -> OSError | ValueError:
    """The error `_portable` describes."""
    if told[0] == "in_use":
        return RunDirInUseError(told[1])
    if told[0] == "bad_file":
        return BadFileError(told[1])
    if told[0] == "os":
        return OSError(*told[1:])
    return ValueError(told[1])


def hold_lock(path: Path, *, user: str, instead: str) -> int:
    """A descriptor of the lock file `path` (created) holding its exclusive lock, this
    process recorded as its holder: the lock `RunDirectory` takes, for other commands that
    own a folder for their whole run (`cvbench demo`). Closing the descriptor, or the end of
    the process, lets it go.

    Args:
        path: the lock file.
        user: what holds such a lock, for the refusal ("training run").
        instead: what to do then ("train in another log directory").

    Raises:
        RunDirInUseError: another process holds it: "<folder> is in use by another <user>
            (pid N on host H since T): wait for it to end, or <instead>".
        BadFileError: `path` is a link or not a regular file.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> fd = hold_lock(d / ".lock", user="demo run", instead="use another folder")
        >>> os.close(fd)  # let it go
    """
    fd = _open_locked(path, create=True, user=user, instead=instead)
    _write_holder(fd)
    return fd


def _open_locked(
    path: Path,
    *,
    create: bool,
    user: str = "training run",
    instead: str = "train in another log directory",
) -> int | None:
    """A descriptor of `path` holding its exclusive lock; None when `path` does not exist and
    `create` is False.

    Raises:
        RunDirInUseError: another process holds the lock.
        BadFileError: `path` is a symbolic link (never followed: `O_NOFOLLOW`) or not a
            regular file.
    """
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o666)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            refuse_link(path)
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadFileError(f"{path} is not a regular file, where a run keeps its lock file")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise RunDirInUseError(
            f"{path.parent} is in use by another {user} ({holder}): wait for it to end, or "
            f"{instead}"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_holder(fd: int) -> None:
    """Records this process as the holder in the (locked) lock file."""
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
    data = (json.dumps(holder, sort_keys=True) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_holder(fd: int) -> str:
    """Who holds the lock, as the lock file says: "pid 12 on host h since ..."."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
        holder = json.loads(os.pread(fd, _HOLDER_LIMIT, 0).decode("utf-8"))
        return f"pid {int(holder['pid'])} on host {holder['host']} since {holder['started']}"
    return "its pid is not recorded"
