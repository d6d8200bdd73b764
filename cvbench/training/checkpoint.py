"""Training checkpoints: one `.npz` file per checkpoint, written atomically, last K kept.

A checkpoint holds every model variable (weights, BatchNorm statistics, seed states), every
optimizer variable (momentum, iteration counter = schedule position, loss scale and its
counter), and a JSON document with the trainer's position (step, epoch, batch in the epoch,
batches consumed). Variables are stored in the order `model.variables` /
`optimizer.variables` list them, with their paths and shapes for a check on restore.

Files are `ckpt-<step, 10 digits>.npz`, written to a temporary file that is renamed into place
(`cvbench.utils.io.atomic_open`), so a process killed mid-write leaves the previous checkpoint
intact; a file that still fails to load (a damaged disk) is skipped when looking for the
newest valid one.
"""

from __future__ import annotations

import json
import os
import re
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from cvbench.utils.io import atomic_open

_NAME = re.compile(r"^ckpt-(\d{10})\.npz$")
_FORMAT_VERSION = 1


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
    meta = {
        "format": _FORMAT_VERSION,
        "model": [_describe(v) for v in model_variables],
        "optimizer": [_describe(v) for v in optimizer_variables],
        "state": state or {},
    }
    arrays = {f"model/{i}": _value(v) for i, v in enumerate(model_variables)}
    arrays.update({f"optimizer/{i}": _value(v) for i, v in enumerate(optimizer_variables)})
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    with atomic_open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def load_checkpoint(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Reads a checkpoint file completely (every array is decompressed and CRC-checked).

    Returns:
        `(meta, arrays)`: the JSON document and the arrays by key ("model/0", ...).

    Raises:
        ValueError: when the file is not a complete checkpoint.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
        meta = json.loads(arrays.pop("meta").tobytes().decode("utf-8"))
        if meta.get("format") != _FORMAT_VERSION:
            raise ValueError(f"unknown checkpoint format {meta.get('format')!r}")
        for group in ("model", "optimizer"):
            for i in range(len(meta[group])):
                if f"{group}/{i}" not in arrays:
                    raise ValueError(f"array {group}/{i} is missing")
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path} is not a valid checkpoint: {e}") from e
    return meta, arrays


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
        """Checkpoint files in the directory, oldest first."""
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
        """Writes the checkpoint for `step`, then deletes all but the newest `keep`."""
        path = save_checkpoint(
            self.directory / checkpoint_name(step),
            model_variables=model_variables,
            optimizer_variables=optimizer_variables,
            state=state,
        )
        for old in self.checkpoints()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def latest(self) -> tuple[Path, dict, dict[str, np.ndarray]] | None:
        """The newest checkpoint that loads completely, as `(path, meta, arrays)`, or None.

        Files that fail to load are reported with a warning and skipped.
        """
        for path in reversed(self.checkpoints()):
            try:
                meta, arrays = load_checkpoint(path)
            except ValueError as e:
                warnings.warn(f"skipping checkpoint: {e}", stacklevel=2)
                continue
            return path, meta, arrays
        return None

    def remove_temporaries(self) -> None:
        """Deletes temporary files left by writers that were killed mid-write."""
        if self.directory.is_dir():
            for p in self.directory.glob(".ckpt-*.tmp*"):
                p.unlink(missing_ok=True)


def find_checkpoint(path: str | os.PathLike) -> Path:
    """Resolves a checkpoint argument: a checkpoint file, a checkpoint directory, or a run
    directory holding `checkpoints/`; directories give their newest valid checkpoint.

    Raises:
        FileNotFoundError: when there is no such path or no valid checkpoint in it.
    """
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"no checkpoint at {path}")
    directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    found = CheckpointManager(directory).latest()
    if found is None:
        raise FileNotFoundError(f"no valid checkpoint (ckpt-*.npz) in {directory}")
    return found[0]


def _describe(variable: keras.Variable) -> dict:
    return {"path": variable.path, "shape": list(variable.shape), "dtype": str(variable.dtype)}


def _value(variable: keras.Variable) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable.value))
