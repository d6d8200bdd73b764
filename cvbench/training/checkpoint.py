"""Training checkpoints: one `.npz` file per checkpoint, written atomically, last K kept.

A checkpoint holds every model variable (weights, BatchNorm statistics, seed states), every
optimizer variable (momentum, iteration counter = schedule position, loss scale and its
counter), and a JSON document with the trainer's position (step, epoch, batch in the epoch,
batches consumed). Variables are stored in the order `model.variables` /
`optimizer.variables` list them, with their paths and shapes for a check on restore.

Files are `ckpt-<step, 10 digits>.npz`, written to a temporary file that is renamed into place
(`cvbench.utils.io.atomic_open`), so a process killed mid-write, or a write that runs out of
disk space, leaves the previous checkpoint intact. The metadata holds a SHA-256 checksum of
the arrays (format 2), verified on every load on top of the archive's CRC-32s, so a flipped
bit is detected instead of loaded; a file that fails to load (truncated, bit-flipped) is
skipped with a warning when looking for the newest valid one.

Before any array is read, the sizes the archive declares are checked against the file
(`check_archive`): a small file whose zip directory or `.npy` headers ask for gigabytes is
refused, naming the file and the member, instead of being allocated. What the metadata says
about the run (its state: counters, sums, plan, settings) is checked for types and ranges
(`check_state`) before a resume or a reader of its settings uses it, which the checksum of
the arrays does not cover: a crafted field is refused naming the file and the field.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import keras
import numpy as np

from cvbench.training.epoch_loop import check_fields, is_count, shown
from cvbench.training.run_dir import RunFolder
from cvbench.utils.errors import BadFileError, CvbenchError
from cvbench.utils.files import check_regular, loads_json, match_files, open_input
from cvbench.utils.io import atomic_open
from cvbench.utils.model_file import DEFLATE_MAX_RATIO, check_npz  # noqa: F401 - its limit

_NAME = re.compile(r"^ckpt-(\d{10})\.npz$")
_FORMAT_VERSION = 2  # 2: with the arrays' SHA-256; 1 (no checksum) still loads
_READABLE_FORMATS = (1, 2)
_ZIP_MAGIC = b"PK\x03\x04"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
#: The largest metadata member read; cvbench writes a few KiB (100 bytes per variable).
META_LIMIT = 16 * 2**20


class CheckpointWriteError(CvbenchError, OSError):
    """A checkpoint could not be written for lack of disk space (`errno` is ENOSPC); the
    checkpoints written before are intact."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint taken after `step` steps."""
    return f"ckpt-{step:010d}.npz"


def save_checkpoint(
    path: str | os.PathLike,
    *,
    model_variables: Sequence[keras.Variable],
    optimizer_variables: Sequence[keras.Variable] = (),
    state: dict[str, Any] | None = None,
) -> Path:
    """Writes one checkpoint file atomically.

    Args:
        path: destination `.npz` file.
        model_variables: `model.variables`.
        optimizer_variables: `optimizer.variables` (may be empty).
        state: JSON-serializable trainer state.

    Returns:
        The path written.
    """
    path = Path(path)
    arrays = {f"model/{i}": _value(v) for i, v in enumerate(model_variables)}
    arrays.update({f"optimizer/{i}": _value(v) for i, v in enumerate(optimizer_variables)})
    meta = {
        "format": _FORMAT_VERSION,
        "model": [_describe(v) for v in model_variables],
        "optimizer": [_describe(v) for v in optimizer_variables],
        "state": state or {},
        "sha256": arrays_checksum(arrays),
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    with atomic_open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _check_zip_magic(path: str | os.PathLike, file: IO[bytes]) -> None:
    """Raises `BadFileError` unless the opened `file` starts as a zip archive (an `.npz`)
    does."""
    magic = file.read(len(_ZIP_MAGIC))
    file.seek(0)
    if _ZIP_MAGIC.startswith(magic):  # also a file cut off in its first bytes
        if magic != _ZIP_MAGIC:
            raise BadFileError(
                f"{path} is not a valid checkpoint: it ends after {len(magic)} bytes"
            )
    else:
        raise BadFileError(
            f"{path} is not a cvbench checkpoint: it is not an .npz archive (checkpoints are "
            "the ckpt-<step>.npz files the Trainer writes in <log dir>/checkpoints)"
        )


def _read_arrays(path: str | os.PathLike, *, meta_only: bool) -> dict[str, np.ndarray]:
    """The arrays of the checkpoint file `path` (only its metadata with `meta_only`), once
    it is known to be a regular file, a zip archive, and `check_archive`'s sizes hold.

    Raises:
        BadFileError: naming the file (not a regular file, not an archive, damaged).
    """
    try:
        with open_input(path, what="checkpoint") as f:
            _check_zip_magic(path, f)
            check_npz(path, f, what="checkpoint", member_limits={"meta.npy": META_LIMIT})
            with np.load(f, allow_pickle=False) as data:
                if meta_only and "meta" not in data.files:
                    raise BadFileError(f"{path} is not a cvbench checkpoint: no cvbench metadata")
                keys = ["meta"] if meta_only else data.files
                return {key: data[key] for key in keys}
    except (BadFileError, FileNotFoundError):
        raise  # a missing file (a dangling link) is missing, not damaged
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise BadFileError(f"{path} is not a valid checkpoint: {e}") from e


def _parse_meta(path: str | os.PathLike, raw: np.ndarray) -> dict:
    """The metadata member's JSON document, its depth bounded (`loads_json`).

    Raises:
        BadFileError: `"<path> is not a valid checkpoint: ..."`.
    """
    try:
        meta = loads_json(raw.tobytes(), source="its metadata")
    except BadFileError as e:
        raise BadFileError(f"{path} is not a valid checkpoint: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") not in _READABLE_FORMATS:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise BadFileError(f"{path} is not a valid checkpoint: unknown format {found!r:.40}")
    return meta


# The members of a Keras 3 `.keras` model file (a zip archive, as an `.npz` is).
_KERAS_FILE_MEMBERS = {"config.json", "metadata.json"}


def load_checkpoint(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Reads a checkpoint file completely: every array is decompressed and CRC-checked, and
    the arrays' SHA-256 is compared with the one stored at writing (format 2).

    Returns:
        `(meta, arrays)`: the JSON document and the arrays by key ("model/0", ...).

    Raises:
        BadFileError: (a `ValueError`) `"<path> is not a cvbench checkpoint: ..."` for a
            file of another kind (not an `.npz` archive, or one without cvbench's metadata);
            `"<path> is not a valid checkpoint: ..."` for a damaged or crafted one (truncated,
            bit-flipped, sizes that lie, metadata nested too deep, not a regular file),
            saying why; also a file that cannot be opened.
    """
    arrays = _read_arrays(path, meta_only=False)
    if "meta" not in arrays and set(arrays) >= _KERAS_FILE_MEMBERS:
        raise BadFileError(
            f"{path} is not a cvbench checkpoint: it is a Keras model file (.keras, a zip of "
            f"{', '.join(sorted(arrays)[:5])}); load it with keras.saving.load_model(path) or "
            "cvbench.inference.load_model(path), or its weights into a built model with "
            "model.load_weights(path)"
        )
    if "meta" not in arrays:
        raise BadFileError(
            f"{path} is not a cvbench checkpoint: the .npz archive has no cvbench metadata "
            f"(it holds {', '.join(sorted(arrays)[:5]) or 'no arrays'})"
        )
    meta = _parse_meta(path, arrays.pop("meta"))
    try:
        for group in ("model", "optimizer"):
            for i in range(len(meta[group])):
                if f"{group}/{i}" not in arrays:
                    raise ValueError(f"array {group}/{i} is missing")
        if meta["format"] >= 2:
            actual = arrays_checksum(arrays)
            if actual != meta["sha256"]:
                raise ValueError(
                    f"checksum mismatch: the arrays' SHA-256 is {actual[:16]}..., the metadata "
                    f"says {str(meta['sha256'])[:16]}... (the file is damaged)"
                )
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise BadFileError(f"{path} is not a valid checkpoint: {e}") from e
    return meta, arrays


def read_checkpoint_meta(path: str | os.PathLike) -> dict:
    """A checkpoint's JSON document without reading its arrays: what a run's settings check
    (`cvbench eval` choosing the run's recipe) needs before the weights. The sizes of the
    archive are checked as `load_checkpoint` does (`check_archive`); the arrays' CRCs and
    checksum are checked when they are loaded.

    Raises:
        BadFileError: (a `ValueError`) as `load_checkpoint`, for a file that is no cvbench
            checkpoint or whose archive or metadata is damaged; and for a state field of the
            wrong type or range (`check_state`).
    """
    meta = _parse_meta(path, _read_arrays(path, meta_only=True)["meta"])
    check_state(path, meta)
    return meta


#: The plan's fields (`run_plan`) that are whole numbers, each with its least value.
_PLAN_COUNTS = {"global_batch": 1, "ranks": 1, "planned_steps": 0, "epochs": 0,
                "steps_per_epoch": 0}  # fmt: skip


def check_state(path: Path | str, meta: dict) -> None:
    """The one check of what a checkpoint's metadata `meta` says about the run, before a
    resume (`resume.restore_checked`) or a reader of its settings (`read_checkpoint_meta`)
    uses it: its state a dict; the trainer state's counters and sums
    (`epoch_loop.check_fields`); the plan's counts whole numbers (or None), `precision` and
    `model` strings, `settings` a dict whose `recipe` is a string, `knobs` a dict,
    `class_names` strings and `seed` an int; each variable described by a `path` and a
    `shape` of whole numbers. Nothing is restored from a checkpoint that fails it.

    Raises:
        BadFileError: `"<path> is not a valid checkpoint: field 'step': ..."`, naming the
            file and the field.

    Example:
        >>> try:
        ...     check_state("c.npz", {"state": {"model": 16}})
        ... except BadFileError as e:
        ...     print(e)
        c.npz is not a valid checkpoint: field 'model': 16 (int), not a string
    """
    try:
        state = meta.get("state")
        if not isinstance(state, dict):
            raise ValueError(f"field 'state': {shown(state)}, not a dict")
        check_fields(state)
        _check_plan(state)
        for group in ("model", "optimizer"):
            for i, info in enumerate(meta.get(group) or []):
                shape = info.get("shape") if isinstance(info, dict) else None
                if (
                    not isinstance(info, dict)
                    or not isinstance(info.get("path"), str)
                    or not (isinstance(shape, list) and all(is_count(n, 0) for n in shape))
                ):
                    raise ValueError(f"field '{group}[{i}]': {shown(info)}, not a variable's "
                                     "path and shape")  # fmt: skip
    except ValueError as e:
        raise BadFileError(f"{path} is not a valid checkpoint: {e}") from None


def _check_plan(state: dict) -> None:
    """Raises `ValueError` naming the first field of the plan in `state` (`run_plan`) of
    the wrong type or range (see `check_state`)."""
    for key, least in _PLAN_COUNTS.items():
        value = state.get(key)
        if value is not None and not is_count(value, least):
            raise ValueError(f"field {key!r}: {shown(value)}, not an int at least {least} or None")
    for key in ("precision", "model"):
        if state.get(key) is not None and not isinstance(state[key], str):
            raise ValueError(f"field {key!r}: {shown(state[key])}, not a string")
    settings = state.get("settings")
    if settings is None:
        return
    if not isinstance(settings, dict):
        raise ValueError(f"field 'settings': {shown(settings)}, not a dict")
    for key, kind, what in (("recipe", str, "a string"), ("knobs", dict, "a dict")):
        value = settings.get(key)
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"field 'settings.{key}': {shown(value)}, not {what}")
    names, seed = settings.get("class_names"), settings.get("seed")
    if names is not None and not (
        isinstance(names, list) and all(isinstance(n, str) for n in names)
    ):
        raise ValueError(f"field 'settings.class_names': {shown(names)}, not a list of strings")
    if seed is not None and not is_count(seed):
        raise ValueError(f"field 'settings.seed': {shown(seed)}, not an int")


def check_archive(path: str | os.PathLike) -> None:
    """Checks the sizes an `.npz` archive declares before anything is allocated: each member
    lies inside the file, stores as many bytes as its zip entry says (deflate at most
    `DEFLATE_MAX_RATIO` : 1), the members together stay within the file, its `.npy` header's
    shape and dtype come to exactly that size, and the metadata member is at most
    `META_LIMIT` bytes (`cvbench.utils.model_file.check_npz`, which `.npz` weight files get
    too).

    Raises:
        BadFileError: (a `ValueError`) `"<path> is not a valid checkpoint: ..."`, saying
            which member asks for what; or `path` is not a regular file.
    """
    with open_input(path, what="checkpoint") as f:
        check_npz(path, f, what="checkpoint", member_limits={"meta.npy": META_LIMIT})


def arrays_checksum(arrays: dict[str, np.ndarray]) -> str:
    """The SHA-256 (hex) of the arrays' keys, dtypes, shapes and bytes, in key order."""
    digest = hashlib.sha256()
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}:{value.dtype.str}:{value.shape};".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def restore_variables(
    meta: dict,
    arrays: dict[str, np.ndarray],
    *,
    model_variables: Sequence[keras.Variable],
    optimizer_variables: Sequence[keras.Variable] | None = None,
) -> None:
    """Assigns checkpointed values to `model_variables` (and `optimizer_variables`).

    Raises:
        ValueError: when the number, shapes or dtypes of the variables differ.
    """
    groups = [("model", model_variables)]
    if optimizer_variables is not None:
        groups.append(("optimizer", optimizer_variables))
    for group, variables in groups:
        stored = meta[group]
        if len(stored) != len(variables):
            raise ValueError(
                f"checkpoint has {len(stored)} {group} variables, the {group} has "
                f"{len(variables)}: it was written for a different {group}"
            )
        for i, (info, variable) in enumerate(zip(stored, variables, strict=True)):
            value = arrays[f"{group}/{i}"]
            if list(value.shape) != list(variable.shape):
                raise ValueError(
                    f"checkpoint {group} variable {info['path']!r} has shape {value.shape}, "
                    f"{variable.path!r} has {tuple(variable.shape)}"
                )
        for i, variable in enumerate(variables):
            variable.assign(arrays[f"{group}/{i}"].astype(variable.dtype))


class CheckpointManager:
    """Numbered checkpoints in one directory: save, prune to the newest K, find the newest.

    Args:
        directory: where checkpoints live (created on the first save).
        keep: how many of the newest checkpoints to keep.
    """

    def __init__(self, directory: str | os.PathLike, *, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep

    def checkpoints(self) -> list[Path]:
        """Checkpoint files in the directory, oldest first: every name `ckpt-<step>.npz`,
        also one that is not a regular file (a FIFO), which `latest` then skips with a
        warning instead of opening it."""
        if not self.directory.is_dir():
            return []
        found = [p for p in self.directory.iterdir() if _NAME.match(p.name)]
        return sorted(found, key=lambda p: p.name)

    def save(
        self,
        step: int,
        *,
        model_variables: Sequence[keras.Variable],
        optimizer_variables: Sequence[keras.Variable] = (),
        state: dict[str, Any] | None = None,
    ) -> Path:
        """Writes the checkpoint for `step`, then deletes the checkpoints older than it but
        the newest `keep - 1` (checkpoints of later steps are left where they are).

        Raises:
            CheckpointWriteError: the disk is full (ENOSPC, or a quota: EDQUOT); nothing was
                written or deleted, and the message names the newest intact checkpoint.
        """
        path = self.directory / checkpoint_name(step)
        try:
            save_checkpoint(
                path,
                model_variables=model_variables,
                optimizer_variables=optimizer_variables,
                state=state,
            )
        except OSError as e:
            if e.errno not in _NO_SPACE:
                raise
            # `<=`: an existing file of the same step is intact too (the write went to a
            # temporary file), and it is the newest, the one a resume loads.
            earlier = [p for p in self.checkpoints() if p.name <= path.name]
            previous = (
                f"the previous checkpoint {earlier[-1]} is intact"
                if earlier
                else "no earlier checkpoint was written"
            )
            raise CheckpointWriteError(
                f"{os.strerror(e.errno).lower()} writing checkpoint {path}; {previous}; "
                "free space and rerun with resume=True"
            ) from e
        # Only checkpoints older than this one are rotated away: a newer-named file (an
        # invalid checkpoint a resume skipped, or a longer earlier run's) is not this run's
        # to judge, and counting it deleted the checkpoint just written (keep=1).
        older = [p for p in self.checkpoints() if p.name < path.name]
        for old in older[: max(len(older) - (self.keep - 1), 0)]:
            old.unlink(missing_ok=True)
        return path

    def latest(self) -> tuple[Path, dict, dict[str, np.ndarray]] | None:
        """The newest checkpoint that loads completely, as `(path, meta, arrays)`, or None.

        Files that fail to load (damaged, crafted, not regular files, metadata nested too
        deep) are reported with a warning and skipped.
        """
        for path in reversed(self.checkpoints()):
            try:
                meta, arrays = load_checkpoint(path)
            except ValueError as e:
                warnings.warn(f"skipping checkpoint: {e}", stacklevel=2)
                continue
            except FileNotFoundError:
                missing = f"skipping checkpoint: {path} does not exist (a dangling link?)"
                warnings.warn(missing, stacklevel=2)
                continue
            return path, meta, arrays
        return None

    def remove_temporaries(self) -> None:
        """Deletes temporary files left by writers that were killed mid-write."""
        for p in match_files(self.directory, ".ckpt-*.tmp*"):
            p.unlink(missing_ok=True)


def find_checkpoint(path: str | os.PathLike) -> Path:
    """Resolves a checkpoint argument: a checkpoint file, a checkpoint directory, or a run
    directory holding `checkpoints/`; directories give their newest valid checkpoint.

    Raises:
        FileNotFoundError: when there is no such path or no valid checkpoint in it.
        BadFileError: a path that is neither a folder nor a regular file (a FIFO, a device).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if not path.is_dir():
        check_regular(path, what="checkpoint")  # a FIFO or a device: refused, never opened
        return path
    checkpoints = RunFolder(path).checkpoints
    directory = checkpoints if checkpoints.is_dir() else path
    found = CheckpointManager(directory).latest()
    if found is None:
        raise FileNotFoundError(f"no valid checkpoint (ckpt-*.npz) in {directory}")
    return found[0]


def _describe(variable: keras.Variable) -> dict:
    return {"path": variable.path, "shape": list(variable.shape), "dtype": str(variable.dtype)}


def _value(variable: keras.Variable) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable.value))
