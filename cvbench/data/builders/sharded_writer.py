"""Writes a data set as sharded TFRecord files: parallel, resumable, atomic. Generic.

The ImageNet and COCO builders both use `write_sharded`; anything that turns a list of work
items into `tf.train.Example` records can.

How to use it:

1. List the work items of each split (any picklable values: file paths, tuples, frozen
   dataclasses), in the order the records should have (shuffle first if you want).
2. Write a picklable *top-level* function (or a `functools.partial` of one) that turns one
   item into serialized `tf.train.Example` bytes, or returns `Skip(reason)` for an item that
   cannot be written (an unreadable file). It runs in worker processes started with the
   `spawn` method, so its module must import without side effects and should not import
   TensorFlow (`cvbench.data.tfrecord.encode_example` serializes without it). Exceptions it
   raises are bugs: they stop the build.
3. Call::

       summary = write_sharded(
           out_dir,
           [SplitSpec("train", train_items, 1024), SplitSpec("validation", val_items, 128)],
           encode_fn,
           dataset="imagenet",
           options={"quality": 90},          # whatever else changes the records
           item_key=lambda item: item.relpath,  # what identifies an item across machines
       )
       print(summary.format())

What it guarantees:

* Items are split into `num_shards` contiguous ranges whose sizes differ by at most one
  (`shard_ranges`); shard `i` of split `s` is named `pattern.format(split=s, index=i,
  num_shards=n)`, by default `train-00000-of-01024`.
* Each shard is written to a hidden temporary file and renamed into place when complete, so a
  file with a shard's name is always a whole shard. A killed build leaves only temporary files,
  removed by the next run.
* A manifest (`cvbench_manifest.json`, `cvbench.data.builders.manifest`) in `out_dir`
  identifies the data set: the `dataset` name, `options`, and per split the shard count,
  pattern, item count and a SHA-256 over the `item_key` of every item in order. It also
  records each finished shard (records, bytes, skipped items). A rerun with the same
  identity writes only the shards that are missing (or whose size differs from the
  manifest); a rerun with another identity raises `FileExistsError` unless
  `overwrite=True`, which deletes the shards the manifest lists for the splits named and
  writes them again. Splits are independent: a call naming `val` into a folder holding
  `train` adds `val` and keeps `train` (its shards and identity), and `overwrite` never
  touches a split it does not name; the folder's splits share `dataset` and `options`
  (another kind or settings beside kept splits is refused). Files named like a split's
  shards that no manifest lists (another tool's) are refused, with or without `overwrite`:
  it never deletes a file cvbench did not write.
* Worker processes (`num_workers`, default all cores; <= 1 runs in this process;
  `cvbench.data.worker_pool`) encode items; this process writes the shards in order with
  `tf.io.TFRecordWriter`. Progress shows items/s: a tqdm bar on a terminal or in Jupyter,
  a plain line every 10% or minute when stderr is a file or a pipe (no `\r` in logs).
* `Skip` results are collected with their reasons (`WriteSummary.skipped`, also for shards
  written by an earlier run); skipped items leave their shard one record shorter.
* `metadata` (facts about the data set that do not identify it, e.g. images per class) is
  stored in the manifest under "metadata", replaced by every run.
* A full disk (ENOSPC) while writing a shard or the manifest raises `DiskFullError`: the
  partial temporary file is removed, every shard the manifest lists is whole, and rerunning
  once space is free resumes (the result equals a build that never stopped). An `overwrite`
  run deletes the shards it replaces before writing the new ones (building beside them would
  need the disk twice over, and a folder's kept splits stay in place): its message then says
  that the earlier data set's shards are gone, and that the rerun which resumes is the one
  without `overwrite` (with it, the build starts over).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cvbench.data.builders.manifest import (
    MANIFEST_NAME,
    listed_shards,
    manifest_identity,
    prepare_out_dir,
    remove_stale_temporaries,
    whole_shards,
)
from cvbench.data.safe_paths import check_split_name, make_dir
from cvbench.data.worker_pool import ParallelMap, default_num_workers, parallel_map
from cvbench.utils.errors import CvbenchError, printable, require_tensorflow
from cvbench.utils.io import atomic_path, write_json_atomic
from cvbench.utils.progress import progress_bar

DEFAULT_PATTERN = "{split}-{index:05d}-of-{num_shards:05d}"


class DiskFullError(CvbenchError, OSError):
    """The disk filled up (ENOSPC) during `write_sharded`; the finished shards are intact.

    Attributes:
        path: the file being written.
        finished_shards: whole shards in the output directory (listed in its manifest).
        removed_shards: shards of an earlier build this `overwrite` run deleted before
            writing (they are gone: the message says so, and that a rerun without
            `overwrite` resumes where a rerun with it would start over).
    """

    def __init__(self, path: Path, finished_shards: int, removed_shards: int = 0) -> None:
        self.path = path
        self.finished_shards = finished_shards
        self.removed_shards = removed_shards
        # No filename argument: the message names the path (an OSError's one-line
        # description, `cvbench.utils.errors.describe_os_error`, is the message alone).
        super().__init__(errno.ENOSPC, _disk_full_message(path, finished_shards, removed_shards))

    def __str__(self) -> str:
        return self.strerror


def _disk_full_message(path: Path, finished: int, removed: int) -> str:
    """The one line of a `DiskFullError`.

    Example:
        >>> print(_disk_full_message(Path("r/t-00001-of-00002"), 1, 0))
        no space left on device writing r/t-00001-of-00002; 1 finished shards are intact; ...
        >>> print(_disk_full_message(Path("r/t-00001-of-00002"), 1, 3))
        no space left on device writing r/t-00001-of-00002; overwrite (--overwrite) had deleted
        the 3 shards of the data set it replaces before writing; 1 finished shards of the new
        one are intact; free space and rerun without --overwrite to resume (with it, ...)
    """
    if not removed:
        return (
            f"no space left on device writing {path}; {finished} finished shards are intact; "
            "free space and rerun to resume"
        )
    return (
        f"no space left on device writing {path}; overwrite (--overwrite) had deleted the "
        f"{removed} shards of the data set it replaces before writing; {finished} finished "
        "shards of the new one are intact; free space and rerun without --overwrite to resume "
        "(with it, the build starts over)"
    )


@contextlib.contextmanager
def disk_full_as_error(path: str | os.PathLike, summary: WriteSummary):
    """Turns ENOSPC raised inside the block (writing `path`, a file a builder adds beside
    the shards `summary` lists) into `DiskFullError(path, the shards)`."""
    try:
        yield
    except OSError as e:
        if not _is_disk_full(e):
            raise
        shards = sum(r.num_shards for r in summary.splits.values())
        raise DiskFullError(Path(path), shards) from e


def _is_disk_full(error: BaseException) -> bool:
    """ENOSPC from Python (OSError) or from TensorFlow's writer (an OpError whose message
    ends in the system's text for ENOSPC)."""
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    return os.strerror(errno.ENOSPC) in str(error)


def check_out_dir(out_dir: str | os.PathLike) -> str | os.PathLike:
    """`out_dir`, refused when empty: `Path("")` is the current folder, and an empty
    `--output-dir` is a mistake, not a choice of `.`.

    Raises:
        ValueError: naming the empty value (exit 2 in the command).

    Example:
        >>> check_out_dir("")
        Traceback (most recent call last):
        ...
        ValueError: the output folder is empty (--output-dir ''): name a folder (. for the ...)
    """
    if not os.fspath(out_dir).strip():
        raise ValueError(
            f"the output folder is empty (--output-dir {os.fspath(out_dir)!r}): name a folder "
            "(. for the current one)"
        )
    return out_dir


#: Output folders this process holds the build lock of (`build_lock` is reentrant).
_LOCKED: set[str] = set()


@contextlib.contextmanager
def build_lock(out_dir: str | os.PathLike):
    """Holds an exclusive lock on the output folder `out_dir` (made if missing) while a build
    writes into it: a second build into the same folder at the same time (`cvbench
    build-coco` of train in one terminal, of val in another) would lose the other's entries
    in the manifest and `dataset_info.json`. The lock is an `flock` on the folder itself (no
    file is added), released when the block ends or the process dies; reentrant within a
    process (a builder holds it around `write_sharded`, which takes it too).

    Raises:
        FileExistsError: another process is building into `out_dir` (exit 2 in the command).
        ValueError: an empty `out_dir` (`check_out_dir`).
    """
    out = make_dir(check_out_dir(out_dir))
    key = os.path.realpath(out)
    if key in _LOCKED:
        yield out
        return
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FileExistsError(
                f"{out} is being written by another build at this moment; wait for it to end, "
                "then rerun this one (each adds its own splits)"
            ) from None
        _LOCKED.add(key)
        try:
            yield out
        finally:
            _LOCKED.discard(key)
    finally:
        os.close(fd)  # closing the only descriptor releases the flock


@dataclass(frozen=True)
class Skip:
    """Returned by an encode function instead of bytes: the item is left out, with a reason."""

    reason: str


@dataclass(frozen=True)
class SplitSpec:
    """One split to write.

    Attributes:
        name: the split name, e.g. 'train'.
        items: picklable work items in record order.
        num_shards: number of shard files, 1..len(items).
        pattern: shard file name, formatted with `split`, `index` and `num_shards`.
    """

    name: str
    items: Sequence[Any]
    num_shards: int
    pattern: str = DEFAULT_PATTERN

    def shard_name(self, index: int) -> str:
        """The file name of shard `index`."""
        return self.pattern.format(split=self.name, index=index, num_shards=self.num_shards)


@dataclass(frozen=True)
class SkippedItem:
    """An item left out of the data set and why."""

    split: str
    item: str
    reason: str


@dataclass
class SplitResult:
    """What one split holds after `write_sharded`.

    Attributes:
        name: the split.
        num_items: work items given.
        num_records: records in its shards (items minus skipped).
        num_shards: shard files.
        num_bytes: total size of its shard files.
        shards_written: shards written by this run.
        shards_reused: complete shards found from an earlier run.
    """

    name: str
    num_items: int
    num_records: int = 0
    num_shards: int = 0
    num_bytes: int = 0
    shards_written: int = 0
    shards_reused: int = 0


@dataclass
class WriteSummary:
    """The outcome of `write_sharded`.

    Attributes:
        out_dir: where the shards are.
        splits: split name -> `SplitResult`.
        skipped: items left out, with reasons (all runs).
        bytes_written: bytes of the shards written by this run.
        seconds: wall time of this run.
        items_processed: items encoded by this run.
    """

    out_dir: Path
    splits: dict[str, SplitResult]
    skipped: list[SkippedItem] = field(default_factory=list)
    bytes_written: int = 0
    seconds: float = 0.0
    items_processed: int = 0

    def format(self, unit: str = "records") -> str:
        """A multi-line human-readable summary."""
        lines = [f"output: {self.out_dir}"]
        for r in self.splits.values():
            lines.append(
                f"  {r.name}: {r.num_records:,} {unit} in {r.num_shards} shards, "
                f"{format_bytes(r.num_bytes)} ({r.shards_written} written now, "
                f"{r.shards_reused} kept from an earlier run)"
            )
        rate = self.items_processed / self.seconds if self.seconds > 0 else 0.0
        lines.append(
            f"  written now: {format_bytes(self.bytes_written)} in {self.seconds:.1f} s "
            f"({self.items_processed:,} items, {rate:,.1f} items/s)"
        )
        lines.append(f"  skipped: {len(self.skipped)}")
        lines.extend(
            f"    {s.split}: {printable(s.item)}: {printable(s.reason)}" for s in self.skipped
        )
        return "\n".join(lines)


def format_bytes(n: int) -> str:
    """`n` bytes as a short human-readable string (powers of 1024)."""
    value = float(n)
    for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or suffix == "TiB":
            return f"{value:.0f} {suffix}" if suffix == "B" else f"{value:.1f} {suffix}"
        value /= 1024
    raise AssertionError("unreachable")


def shard_ranges(num_items: int, num_shards: int) -> list[tuple[int, int]]:
    """Splits `range(num_items)` into `num_shards` contiguous [start, stop) ranges.

    The first `num_items % num_shards` ranges get one item more. Example: 10 items in 4
    shards -> (0, 3), (3, 6), (6, 8), (8, 10).
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    base, extra = divmod(num_items, num_shards)
    ranges, start = [], 0
    for i in range(num_shards):
        stop = start + base + (1 if i < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


def write_sharded(
    out_dir: str | os.PathLike,
    splits: Sequence[SplitSpec],
    encode_fn: Callable[[Any], bytes | Skip],
    *,
    dataset: str,
    options: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    item_key: Callable[[Any], str] = repr,
    describe: Callable[[Any], str] = str,
    num_workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    unit: str = "item",
) -> WriteSummary:
    """Encodes `splits` with `encode_fn` into sharded TFRecord files in `out_dir`.

    See the module docstring for the guarantees (atomic shards, resume, manifest, skips).

    Args:
        out_dir: the output directory (created if missing).
        splits: the splits to write; names must be distinct.
        encode_fn: picklable top-level function, item -> serialized Example bytes or `Skip`.
        dataset: a name identifying the kind of data set in the manifest, e.g. 'imagenet'.
        options: JSON-serializable settings that change the records (resize, quality, ...);
            part of the data set's identity.
        metadata: JSON-serializable facts about the data set that do not identify it (class
            counts, warnings); stored in the manifest under "metadata" by every run.
        item_key: item -> a string identifying it (e.g. a path relative to the raw data);
            part of the identity. Defaults to `repr`.
        describe: item -> how a skipped item is named in the summary.
        num_workers: encoding processes; None uses every core, <= 1 encodes in this process.
        overwrite: replace the named splits when they differ from those in `out_dir`, and
            rewrite every shard of theirs even when they are the same; the folder's other
            splits are kept.
        progress: show progress on stderr: a tqdm bar on a terminal or in Jupyter, plain
            lines elsewhere (`cvbench.utils.progress.progress_bar`).
        unit: the progress bar's unit name ('img' shows img/s).

    Returns:
        A `WriteSummary`.

    Raises:
        ValueError: bad splits (duplicate names, a shard count < 1 or above the item count) or
            an `encode_fn` that cannot be pickled.
        FileExistsError: `out_dir` holds other versions of the named splits and `overwrite`
            is False; other splits of another kind or settings; or files named like shards
            that no manifest lists (`cvbench.data.builders.manifest.prepare_out_dir`).
        DiskFullError: no space left on the device; the finished shards stay and a rerun
            resumes.
        FileExistsError: also when another process is writing into `out_dir` (`build_lock`).
    """
    start = time.monotonic()
    names = [check_split_name(s.name) for s in splits]  # no shard path leaves out_dir
    if len(set(names)) != len(names):
        raise ValueError(f"split names must be distinct, got {names}")
    for spec in splits:
        if not 1 <= spec.num_shards <= max(1, len(spec.items)):
            raise ValueError(
                f"split {spec.name!r} has {len(spec.items)} items, so its number of shards must "
                f"be in 1..{max(1, len(spec.items))}, got {spec.num_shards}"
            )
    if num_workers is None:
        num_workers = default_num_workers()
    if num_workers > 1:
        try:
            pickle.dumps(encode_fn)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise ValueError(
                f"encode_fn must be picklable (a top-level function or a functools.partial of "
                f"one) to run in worker processes: {e}"
            ) from None

    require_tensorflow("writing TFRecords")  # before the folder, its lock or its manifest
    with build_lock(out_dir) as out:
        return _write_locked(
            out, splits, encode_fn, start, dataset, options, metadata, item_key, describe,
            num_workers, overwrite, progress, unit,
        )  # fmt: skip


def _write_locked(
    out: Path,
    splits: Sequence[SplitSpec],
    encode_fn: Callable[[Any], bytes | Skip],
    start: float,
    dataset: str,
    options: Mapping[str, Any] | None,
    metadata: Mapping[str, Any] | None,
    item_key: Callable[[Any], str],
    describe: Callable[[Any], str],
    num_workers: int,
    overwrite: bool,
    progress: bool,
    unit: str,
) -> WriteSummary:
    """`write_sharded` once its arguments are checked and the folder's lock is held."""
    identity = manifest_identity(dataset, options or {}, splits, item_key)
    before = listed_shards(out)
    manifest = prepare_out_dir(out, identity, splits, overwrite)
    removed = len(before - set(manifest.get("shards", {})))  # deleted by `overwrite`
    manifest.setdefault("shards", {})
    manifest.pop("metadata", None)
    if metadata is not None:
        manifest["metadata"] = json.loads(json.dumps(dict(metadata)))
    remove_stale_temporaries(out, splits)
    manifest_path = out / MANIFEST_NAME

    summary = WriteSummary(out, {s.name: SplitResult(s.name, len(s.items)) for s in splits})
    todo: list[tuple[SplitSpec, int, range]] = []  # (split, shard index, item indices)
    for spec in splits:
        result = summary.splits[spec.name]
        result.num_shards = spec.num_shards
        for index, (lo, hi) in enumerate(shard_ranges(len(spec.items), spec.num_shards)):
            name = spec.shard_name(index)
            entry = manifest["shards"].get(name)
            path = out / name
            if entry is not None and path.is_file() and path.stat().st_size == entry["bytes"]:
                result.shards_reused += 1
                result.num_records += entry["records"]
                result.num_bytes += entry["bytes"]
                summary.skipped += [SkippedItem(spec.name, i, r) for i, r in entry["skipped"]]
            else:
                manifest["shards"].pop(name, None)
                todo.append((spec, index, range(lo, hi)))
    try:
        write_json_atomic(manifest_path, manifest)
    except OSError as e:
        if not _is_disk_full(e):
            raise
        raise DiskFullError(manifest_path, whole_shards(out, manifest), removed) from e

    todo_items = (spec.items[i] for spec, _, indices in todo for i in indices)
    total = sum(len(indices) for _, _, indices in todo)
    chunksize = max(1, min(32, total // (max(1, num_workers) * 8)))
    results = parallel_map(encode_fn, todo_items, num_workers if total else 0, chunksize)
    bar = progress_bar(total=total, unit=unit, disable=not progress, file=sys.stderr)
    try:
        import tensorflow as tf  # only this process writes TFRecords

        for spec, index, indices in todo:
            bar.set_description(spec.name)
            name = spec.shard_name(index)
            records, skipped = 0, []
            writing = out / name
            try:
                with atomic_path(writing) as tmp, tf.io.TFRecordWriter(str(tmp)) as writer:
                    for i in indices:
                        encoded = next(results)
                        if isinstance(encoded, Skip):
                            skipped.append([describe(spec.items[i]), encoded.reason])
                        else:
                            writer.write(encoded)
                            records += 1
                        bar.update(1)
                size = writing.stat().st_size
                manifest["shards"][name] = {"records": records, "bytes": size, "skipped": skipped}
                writing = manifest_path
                write_json_atomic(manifest_path, manifest)
            except Exception as e:  # OSError, or TensorFlow's ResourceExhaustedError
                if not _is_disk_full(e):
                    raise
                # A shard the manifest could not record is rewritten by the next run.
                manifest["shards"].pop(name, None)
                raise DiskFullError(writing, whole_shards(out, manifest), removed) from e
            result = summary.splits[spec.name]
            result.shards_written += 1
            result.num_records += records
            result.num_bytes += size
            summary.bytes_written += size
            summary.skipped += [SkippedItem(spec.name, i, r) for i, r in skipped]
    finally:
        if isinstance(results, ParallelMap):
            results.close()  # stops the workers, also on an error or interrupt
        bar.close()
    summary.items_processed = total
    summary.seconds = time.monotonic() - start
    return summary
