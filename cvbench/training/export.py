"""The Trainer's export of a trained model (`Trainer.export`, and `fit`'s end with
`TrainConfig(export=True)`): a `.keras` file with its `ModelInfo`, the same info as
`model_info.json` beside it (class names and resize rule without unzipping), and on
TensorFlow Keras' own SavedModel of the same model, `keras_saved_model/`. Pass a model of
built-in layers (`Trainer.user_model()`, `cvbench.utils.plain_keras.to_plain_keras`) for a
file plain Keras loads.

Two contracts, two names (`cvbench.utils.model_file.CONTRACTS`): `model.keras` and
`keras_saved_model/` take float32 RGB in [0, 255] already resized to the model's input size
and return logits (SSDs: box codes and class logits), what `model.export` gives; a
*serving* export (`cvbench export model.keras --output saved_model`,
`cvbench.inference.export.export_for_serving`) takes uint8 images of any size, resizes them
by the model's rule in the graph and returns probabilities, top-k classes and their names
(SSDs: NMS-ed detections). Every folder cvbench calls `saved_model` is a serving export;
this layer cannot build one (the serving graph needs the data and detection layers).

The files are written in a temporary folder inside the export folder,
`.export-<pid>-...`, and renamed into place; the folder is removed however the export ends
(an error, SIGTERM or Ctrl-C: `finally`), and one left by a process killed outright (SIGKILL)
is removed by the next export into the same folder, once that process is gone. An entry of
the export folder that is a symbolic link is refused (`BadFileError`), never written through,
and one that cvbench did not write (a user's `model.keras`, a file a user put in
`keras_saved_model/`) is refused (`ValueError`) before anything is written: an export
replaces only an earlier cvbench export, unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import keras

from cvbench.utils.files import (
    check_output,
    record_tree,
    recording,
    refuse_link,
    remove_dead_staging,
    staging_folder,
    tree_written_by_cvbench,
    written_by_cvbench,
)
from cvbench.utils.model_file import (
    DATASET_ATTRIBUTE,
    ModelInfo,
    attached_inputs,
    info_file_path,
    save_model,
    write_info_file,
)


def export_trained_model(
    model: keras.Model, directory: str | Path, *, info: ModelInfo | None = None
) -> dict[str, Path]:
    """Writes `directory/model.keras` (with `info`), `directory/model_info.json` (`info`,
    when given) and, on TensorFlow, `directory/keras_saved_model/` (the same model's
    function: module docstring).

    Each is written under a temporary name and renamed into place, replacing an older export
    (module docstring).

    Args:
        model: the model to export (as users get it).
        directory: output directory (created).
        info: what inference needs, stored in `model.keras` (`cvbench.utils.model_file`)
            and beside it.

    Returns:
        The written paths by kind: "keras", "info" (with `info`) and, on TensorFlow,
        "keras_saved_model".
    """
    if info is None:
        warnings.warn(
            f"{directory}/model.keras gets no ModelInfo (class names, input size, resize): "
            "cvbench predict and classify will refuse it. Train on a cvbench dataset "
            "(imagenet_dataset states its inputs) or pass Trainer(model_info=..., "
            "export_transform=...)",
            stacklevel=3,
        )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    keras_path, final = directory / "model.keras", directory / KERAS_SAVED_MODEL
    info_path = info_file_path(keras_path)
    for path in (keras_path, final, info_path):
        refuse_link(path)
    _check_replaceable(keras_path, info_path if info is not None else None,
                       final if keras.config.backend() == "tensorflow" else None)  # fmt: skip
    remove_stale_export_staging(directory)
    staging = staging_folder(directory, _STAGING)
    written = {}
    try:
        with _naming(keras_path):
            save_model(model, staging / "model.keras", info)
        # cvbench's, for a later --overwrite to replace: recorded before the rename
        with recording(keras_path, staged=staging / "model.keras"):
            os.replace(staging / "model.keras", keras_path)
        written["keras"] = keras_path
        if info is not None:
            with _naming(info_path):
                written["info"] = write_info_file(info, keras_path, contract="model")
        if keras.config.backend() == "tensorflow":
            with _naming(final):
                _write_saved_model(model, staging / "model")
            record_tree(staging / "model")
            if final.exists():
                os.rename(final, staging / "previous")
            (staging / "model").rename(final)
            written["keras_saved_model"] = final
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def _check_replaceable(*paths: Path | None) -> None:
    """Refuses, before anything is written, to replace a file or folder of the export that
    cvbench did not write (a user's `model.keras`, notes in `keras_saved_model/`): only an
    earlier cvbench export, unchanged, is replaced.

    Raises:
        ValueError: naming the path (`cvbench.utils.files.check_output`).
    """
    for path in paths:
        if path is not None:
            is_ours = tree_written_by_cvbench if path.is_dir() else written_by_cvbench
            check_output(path, overwrite=True, is_ours=is_ours, flag="Trainer.export")


#: The folder of Keras' own SavedModel of the exported model (`model.keras`'s contract; a
#: serving export is `cvbench export`'s `saved_model`).
KERAS_SAVED_MODEL = "keras_saved_model"


#: The start of the name of an export's temporary folder (then the pid of its process).
_STAGING = ".export-"


def remove_stale_export_staging(directory: str | os.PathLike) -> list[Path]:
    """Removes the temporary folders that exports into `directory` left when their process
    was killed outright (`.export-<host>-<pid>-...` of a process of this machine no longer
    running, `files.remove_dead_staging`); returns them.

    Example:
        >>> import tempfile
        >>> from cvbench.utils.io import HOST_TAG
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / f".export-{HOST_TAG}-999999999-x").mkdir()  # no such process here
        >>> [p.name for p in remove_stale_export_staging(d)] == [f".export-{HOST_TAG}-999999999-x"]
        True
    """
    return remove_dead_staging(directory, _STAGING)


def user_model(
    model: keras.Model, transform: Callable[[keras.Model], keras.Model] | None = None
) -> keras.Model:
    """`transform(model)`, by default `to_plain_keras(model)`, warning and returning `model`
    as it is when it holds layers `to_plain_keras` cannot convert (`Trainer.user_model`)."""
    if transform is not None:
        return transform(model)
    from cvbench.utils.plain_keras import to_plain_keras

    try:
        return to_plain_keras(model)
    except ValueError as err:
        # stacklevel 3: the warning names the caller of `Trainer.user_model`, as before.
        warnings.warn(f"exporting the model as it is: {err}", stacklevel=3)
        return model


#: The attribute of a dataset holding its input contract, spelled in
#: `cvbench.utils.model_file` (read it with `attached_inputs`).
INPUTS_ATTRIBUTE = DATASET_ATTRIBUTE


def adopt_inputs(trainer: Any, *datasets: Any) -> None:
    """Gives `trainer` the `model_info` and `export_transform` of the first of `datasets`
    that carries an input contract (`cvbench.utils.model_file.attached_inputs`: what
    `imagenet_dataset` hands over with `attach_inputs`), unless the caller gave either: the
    model files then take [0, 255] RGB with the pipeline's normalization in front, and record
    its class names and resize rule."""
    if trainer.model_info is not None or trainer.export_transform is not None:
        return
    for data in datasets:
        inputs = attached_inputs(data)
        if inputs is not None:
            trainer.model_info = inputs.model_info_for(trainer.model)
            trainer.export_transform = inputs.user_model
            return


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An `OSError` without a file name (a full disk while a writer streams), or
    TensorFlow's error for a full, read-only or forbidden disk (SavedModel), becomes an
    `OSError` naming `path`."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e
    except Exception as e:
        tf = sys.modules.get("tensorflow")
        if tf is None or not isinstance(e, tf.errors.OpError):
            raise
        for code in _TF_DISK_ERRORS:
            if os.strerror(code) in e.message:
                raise OSError(code, os.strerror(code), str(path)) from e
        raise


#: The disk errors TensorFlow's writers report as text: full, quota, read-only, forbidden.
_TF_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)


def _write_saved_model(model: keras.Model, path: Path) -> None:
    """`model`'s SavedModel, what `model.export(path)` writes (endpoint "serve", also the
    "serving_default" signature; inference mode) with each weight stored once: Keras 3.15's
    `export` also tracks the model, which saves every weight a second time."""
    import tensorflow as tf

    specs = [
        tf.TensorSpec((None, *tensor.shape[1:]), tensor.dtype, name=tensor.name)
        for tensor in model.inputs
    ]
    archive = keras.export.ExportArchive()
    archive.add_endpoint(
        "serve", lambda *x: model(x[0] if len(x) == 1 else list(x), training=False), specs
    )
    archive.write_out(str(path), verbose=False)
