"""Serving export: a SavedModel (TF Serving, `tf.saved_model.load`) or a TFLite file whose
signature takes uint8 images and returns what a client uses (see `cvbench.inference.serving`
for the inputs and outputs): probabilities and top-k for classifiers; decoded, NMS-ed,
clipped boxes (`[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`, as the OD API's exported
detectors), scores, classes and counts for SSDs.

The exported graph runs the model with its batch norms folded into the convolutions before
them (`cvbench.inference.fold_batchnorm`). Export needs TensorFlow: under another Keras
backend it raises (the `.keras` file loads on TensorFlow: run the export there).

An export is written beside its destination under a temporary name and renamed into place;
`overwrite=True` then swaps it with the previous one (renamed aside, deleted once the new one
is in place, renamed back if that fails). It only ever replaces a previous cvbench export
(`cvbench.inference.outputs.is_cvbench_export`: a SavedModel folder holding its
`EXPORT_MARKER` and only the files export wrote and recorded; or a TFLite file export wrote
and recorded, `cvbench.utils.files.written_by_cvbench`), never another file or folder, and
never the current folder, a parent of it, the home folder or `/` (`protected_folder`).

The temporary folder is named `.<name>.export-<pid>-...` and removed however the export ends
(an error, SIGTERM or Ctrl-C: `finally`); one left by a process that was killed outright
(SIGKILL, a lost machine) is removed by the next export to the same path
(`remove_stale_serving_staging`), once its process is gone.

Both formats carry the model file's `ModelInfo` (`cvbench.inference.export_info`:
`read_export_info`), and the same info is written beside the export as plain JSON,
`<name>_info.json` (`cvbench.utils.model_file.write_info_file`, contract "serving":
`served/classifier` -> `served/classifier_info.json`, `ssd.tflite` ->
`ssd_tflite_info.json`),
checked before any work like the export itself (an existing one is replaced only with
`overwrite`, and only when cvbench wrote it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cvbench.detection.anchors import multiscale_anchors
from cvbench.inference import serving
from cvbench.inference.detection import SCORE_THRESHOLD
from cvbench.inference.export_info import export_marker, with_tflite_info
from cvbench.inference.fold_batchnorm import fold_batchnorm
from cvbench.inference.outputs import (
    EXPORT_MARKER,
    check_parent_path,
    check_replaceable,
    errors_naming,
)
from cvbench.utils.files import (
    check_output,
    record_tree,
    recording,
    remove_dead_staging,
    staging_folder,
    written_by_cvbench,
)
from cvbench.utils.model_file import (
    MAX_INPUT_SIDE,
    ModelInfo,
    check_score_threshold,
    info_file_path,
    load_model,
    require_model_info,
    write_info_file,
)

FORMATS = ("saved_model", "tflite")
#: Name of the serving signature (TF Serving's default).
SIGNATURE = "serving_default"


def export_for_serving(
    model_or_path: Any,
    out: str | os.PathLike,
    *,
    format: str = "saved_model",
    info: ModelInfo | None = None,
    top_k: int = 5,
    score_threshold: float | None = SCORE_THRESHOLD,
    fold: bool = True,
    overwrite: bool = False,
    max_input_side: int = MAX_INPUT_SIDE,
) -> Path:
    """Writes a serving export of a classifier or an SSD (the `cvbench export` command; the
    Trainer's own `model.keras` + SavedModel is `cvbench.training.export.export_trained_model`).

    Args:
        model_or_path: a Keras model, or the path of a `.keras` model file (its `ModelInfo`
            is used unless `info` is given).
        out: the SavedModel directory, or the `.tflite` file, to write (atomically: written
            under a temporary name beside it and renamed); its info file
            (`cvbench.utils.model_file.info_file_path`) is written beside it.
        format: "saved_model" or "tflite".
        info: the model's `ModelInfo` (task, input size, post-processing); required with a
            model object.
        top_k: classifiers: classes returned per image (at most the class count).
        score_threshold: SSDs: keep the detections scoring above it; by default
            `cvbench.inference.detection.SCORE_THRESHOLD` (0.5, what `detect` and `cvbench
            predict` show); None: the model file's own post-processing threshold (1e-8
            for SSD320: COCO evaluation's, every image then returns `max_total` boxes).
        fold: fold the batch norms into the convolutions (`fold_batchnorm`).
        overwrite: replace an existing `out` that is a previous cvbench export (module
            docstring).
        max_input_side: the largest input side a model file may declare, in pixels.

    Returns:
        The path written.

    Raises:
        RuntimeError: under a Keras backend other than TensorFlow.
        ValueError: for a bad format, `top_k` or threshold, a missing `info`, an
            `info.image_size` that is not the model's input size, an empty `out`, or an
            existing `out` that `overwrite` may not replace (nothing is deleted then).
        FileExistsError: if `out` exists and `overwrite` is False.
        OSError: when writing fails (a read-only or full disk, a file where a folder is
            expected); a previous export at `out` is left as it was.
    """
    if _backend() != "tensorflow":
        raise RuntimeError(
            f"export needs the TensorFlow backend (KERAS_BACKEND={_backend()}); "
            "the .keras file loads on TensorFlow: export it there"
        )
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}; got {format!r}")
    checked = _ServingOptions(top_k, score_threshold)  # bad values refused before any work
    label = os.fspath(out)
    out = _checked_destination(label, overwrite=overwrite)
    model, info = _model_and_info(model_or_path, info, max_input_side=max_input_side)
    served = fold_batchnorm(_functional(_plain_or_same(model), info)) if fold else model
    fn = serving_function(
        served,
        info,
        top_k=top_k,
        score_threshold=score_threshold,
        probabilities=_ends_in_softmax(model),
    )
    served_info = _as_served(info, checked.score_threshold)
    with errors_naming(label):
        _write_export(served, fn, out, format=format, info=served_info, overwrite=overwrite)
    with errors_naming(os.fspath(info_file_path(label))):
        write_info_file(served_info, out, contract="serving")
    return Path(label)


def _checked_destination(label: str, *, overwrite: bool) -> Path:
    """The absolute export path of `label` (`..` and `.` resolved, links kept), once it and
    its info file may be written: refused before any work otherwise."""
    if not label:
        raise ValueError("the export path is empty: name the folder or file to write")
    out = Path(os.path.abspath(label))
    check_replaceable(out, overwrite=overwrite, label=label)
    check_parent_path(out)
    check_output(
        info_file_path(out),
        overwrite=overwrite,
        is_ours=written_by_cvbench,
        flag="overwrite=True",  # the CLI says --overwrite (`cvbench.cli.errors._API_HINTS`)
    )
    return out


def _model_and_info(
    model_or_path: Any, info: ModelInfo | None, *, max_input_side: int
) -> tuple[Any, ModelInfo]:
    """The model to export and its `ModelInfo` (`info`, else the model file's), whose
    `image_size` must be the model's input size."""
    model = model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        import cvbench.detection.ssd  # noqa: F401  (registers the layers a model file may hold)
        import cvbench.models  # noqa: F401

        if info is None:  # before loading: a file without one is refused fast
            require_model_info(model_or_path, max_input_side=max_input_side)
        model, stored = load_model(model_or_path, max_input_side=max_input_side)
        info = info or stored
    if info is None:
        raise ValueError("export needs the model's ModelInfo: pass info= (or a model file)")
    size = tuple(getattr(model, "input_shape", (None, None, None))[1:3])
    if None not in size and size != tuple(info.image_size):
        raise ValueError(
            f"the model's input size {size} differs from the ModelInfo's image_size "
            f"{tuple(info.image_size)}"
        )
    return model, info


def _as_served(info: ModelInfo, score_threshold: float | None) -> ModelInfo:
    """`info` with the score threshold the export applies (what the export carries): a
    detector's (`info.detection` present) with `score_threshold` unless None."""
    return _KINDS[info.head.task].served_info(info, score_threshold)


def _write_export(
    served: Any, fn: Any, out: Path, *, format: str, info: ModelInfo, overwrite: bool
) -> None:
    """Writes the export in a temporary folder beside `out`, then swaps it into place
    (without `overwrite`, never over anything that appeared at `out` meanwhile)."""
    import tensorflow as tf

    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_serving_staging(out)
    staging = staging_folder(out.parent, _staging_prefix(out))
    try:
        saved = staging / "saved_model"
        try:
            _write_saved_model(served, fn, saved)
        except tf.errors.OpError as err:  # TensorFlow's file system: a full or read-only disk
            raise _os_error(err) from None
        if format == "saved_model":
            result = saved
            (saved / EXPORT_MARKER).write_text(export_marker(info, format), encoding="utf-8")
            record_tree(saved)  # what --overwrite may later replace: these files only
        else:
            result = staging / "model.tflite"
            result.write_bytes(with_tflite_info(to_tflite(saved), info))
        _chmod_for_umask(result)
        # a TFLite file is recorded before its swap (a SavedModel's files were, above)
        tflite = format == "tflite"
        with recording(out, staged=result) if tflite else contextlib.nullcontext():
            _swap_into_place(result, out, aside=staging / "previous", overwrite=overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _staging_prefix(out: Path) -> str:
    return f".{out.name}.export-"


def remove_stale_serving_staging(out: str | os.PathLike) -> list[Path]:
    """Removes the temporary folders that exports to `out` left beside it when their
    process was killed outright (named `.<name>.export-<pid>-...`, of a process that no
    longer runs); those of a running export are left alone.

    Returns:
        The folders removed.
    """
    out = Path(out)
    return remove_dead_staging(out.parent, _staging_prefix(out))


def _os_error(error: Any) -> OSError:
    """The `OSError` a TensorFlow file-system error stands for (its message has the reason)."""
    message = str(getattr(error, "message", error))
    for code in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EIO):
        if os.strerror(code) in message:
            return OSError(code, os.strerror(code))
    return OSError(errno.EIO, message.strip().splitlines()[0] if message.strip() else "I/O error")


def _swap_into_place(new: Path, out: Path, *, aside: Path, overwrite: bool = True) -> None:
    """Renames `new` onto `out`; an existing `out` is first renamed to `aside` (deleted with
    its folder by the caller) and renamed back if the second rename fails. Without
    `overwrite`, `out` is placed only where nothing is (`_place_new`).

    Raises:
        ValueError: without `overwrite`, something appeared at `out` during the export
            (another export to the same path at the same time); it is left as it is.
    """
    if not overwrite or not os.path.lexists(out):
        _place_new(new, out)
        return
    os.rename(out, aside)
    try:
        os.rename(new, out)
    except BaseException:
        os.rename(aside, out)
        raise


def _place_new(new: Path, out: Path) -> None:
    """Renames `new` to `out` where nothing is at `out`, refusing atomically what appeared
    there since the export began: a file is linked (`link` never replaces), a folder renamed
    (`rename` fails onto a file or a folder holding anything)."""
    try:
        if new.is_dir():
            os.rename(new, out)
        elif not _linked(new, out):  # a file system without hard links: checked, renamed
            if os.path.lexists(out):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(out))
            os.rename(new, out)
    except (FileExistsError, NotADirectoryError, IsADirectoryError) as error:
        raise _appeared(out) from error
    except OSError as error:
        if error.errno != errno.ENOTEMPTY:
            raise
        raise _appeared(out) from error


def _linked(new: Path, out: Path) -> bool:
    """Whether `new` is now at `out` by a hard link (never replacing: `FileExistsError`);
    False where the file system has no hard links."""
    try:
        os.link(new, out)
    except OSError as error:
        if error.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
            return False
        raise
    os.unlink(new)
    return True


def _appeared(out: Path) -> ValueError:
    return ValueError(
        f"{out} appeared while this export was written (another export to it at the same "
        "time?); it was left as it is: pass overwrite=True to replace it, or export elsewhere"
    )


@dataclass(frozen=True)
class _ServingOptions:
    """The export's choices of what the signature returns (each kind reads its own), checked
    whatever the kind, before any model is loaded: a bad value is an error even where the
    kind ignores it (`top_k` of a detector, `score_threshold` of a classifier).

    Raises:
        ValueError: for a `top_k` that is no int >= 1, or a threshold outside `[0, 1)`
            (`check_score_threshold`), naming the value.
    """

    top_k: int
    score_threshold: float | None
    probabilities: bool = False

    def __post_init__(self) -> None:
        top_k = self.top_k
        if isinstance(top_k, bool) or not (isinstance(top_k, int) and top_k >= 1):
            raise ValueError(f"top_k must be an int >= 1; got {top_k!r}")
        if self.score_threshold is not None:
            object.__setattr__(self, "score_threshold", check_score_threshold(self.score_threshold))


def serving_function(
    model: Any,
    info: ModelInfo,
    *,
    top_k: int = 5,
    score_threshold: float | None = None,
    probabilities: bool = False,
) -> Any:
    """The serving `tf.function` of `model`: uint8 `(B, H, W, 3)` images -> the outputs of
    `cvbench.inference.serving` for the model's kind (`info.head.task`: a classifier's
    top-k, a detector's boxes).

    Raises:
        ValueError: for `top_k` below 1 (above the class count gives every class) or a
            threshold outside `[0, 1)`.
    """
    import tensorflow as tf

    spec = tf.TensorSpec((None, None, None, 3), tf.uint8, name="images")
    options = _ServingOptions(top_k, score_threshold, probabilities)
    serve = _KINDS[info.head.task].serve(model, info, options)
    return tf.function(serve, input_signature=[spec])


def _serve_classifier(model: Any, info: ModelInfo, options: _ServingOptions) -> Callable:
    """uint8 images -> probabilities (or logits' softmax), top-k indices, scores, names."""
    k = min(options.top_k, info.num_classes)
    to_input = serving.model_input_function(info)
    names = info.class_names

    def classify(images):
        logits = model(to_input(images), training=False)
        outputs = serving.classifier_outputs(logits, top_k=k, probabilities=options.probabilities)
        names_k = serving.class_name_tensor(outputs["top_k_indices"], names)
        return {**outputs, "top_k_class_names": names_k}

    return classify


def _serve_detector(model: Any, info: ModelInfo, options: _ServingOptions) -> Callable:
    """uint8 images -> decoded, NMS-ed boxes, scores, classes, counts and class names."""
    post = dict(info.detection["postprocess"])
    if options.score_threshold is not None:
        post["score_threshold"] = options.score_threshold
    anchors = multiscale_anchors(info.image_size, **info.detection["anchors"])
    scales = tuple(info.detection["scales"])
    to_input = serving.model_input_function(info)
    names = info.class_names

    def detect(images):
        outputs = model(to_input(images), training=False)
        found = serving.detections(
            outputs["boxes"], outputs["classes"], anchors, scales=scales, **post
        )
        found_names = serving.class_name_tensor(found["detection_classes"], names)
        return {**found, "detection_class_names": found_names}

    return detect


def _detector_served_info(info: ModelInfo, score_threshold: float | None) -> ModelInfo:
    if score_threshold is None:
        return info
    detection = dict(info.detection)
    detection["postprocess"] = {**detection["postprocess"], "score_threshold": score_threshold}
    return dataclasses.replace(info, detection=detection)


@dataclass(frozen=True)
class _ServingKind:
    """What the export does for one kind of model: its signature, and the info it carries."""

    serve: Callable[[Any, ModelInfo, _ServingOptions], Callable]
    served_info: Callable[[ModelInfo, float | None], ModelInfo]


#: By `ModelInfo.head.task`: a model file with a detection part is a detector.
_KINDS: dict[str, _ServingKind] = {
    "classification": _ServingKind(_serve_classifier, lambda info, _threshold: info),
    "detection": _ServingKind(_serve_detector, _detector_served_info),
}


def to_tflite(saved_model: str | os.PathLike) -> bytes:
    """A float32 TFLite flatbuffer of a SavedModel's serving signature, TFLite built-in ops
    only (the SSD's NMS is `NON_MAX_SUPPRESSION_V5`; an op without a built-in fails the
    conversion instead of needing the Flex delegate at run time)."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(saved_model), signature_keys=[SIGNATURE]
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


def _backend() -> str:
    import keras

    return keras.config.backend()


def _write_saved_model(model: Any, fn: Any, path: Path) -> None:
    import keras

    # The endpoint's variables only: `archive.track(model)` would also save the model's Keras
    # variables beside the TF variables the function uses, every weight twice (Keras 3.15).
    archive = keras.export.ExportArchive()
    archive.add_endpoint(SIGNATURE, fn)
    archive.write_out(str(path), verbose=False)


def _ends_in_softmax(model: Any) -> bool:
    import keras

    last = model.layers[-1] if getattr(model, "layers", None) else None
    return getattr(last, "activation", None) is keras.activations.softmax


def _chmod_for_umask(path: Path) -> None:
    """Gives `path` (a file, or a directory tree) the permissions the user's umask allows
    (`mkdtemp` creates 0o700)."""
    umask = os.umask(0)
    os.umask(umask)
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    for p in paths:
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~umask)


def _functional(model: Any, info: ModelInfo) -> Any:
    """A `keras.Sequential` as the functional model of the same layers (sharing their
    weights), which `fold_batchnorm` can read; any other model as it is. `cvbench predict`
    runs a Sequential model file, and `cvbench export` exports it."""
    import keras

    if not isinstance(model, keras.Sequential):
        return model
    try:
        shape = tuple(model.input_shape)
    except (AttributeError, ValueError):  # built without an Input: the model file's size
        shape = (None, *info.image_size, 3)
    inputs = keras.Input(batch_shape=shape)
    x = inputs
    for layer in model.layers:
        x = layer(x)
    return keras.Model(inputs, x, name=model.name)


def _plain_or_same(model: Any) -> Any:
    """`model` as built-in Keras layers (`to_plain_keras`: the SSD's pyramid and head become
    functional graphs whose batch norms can fold), or `model` itself when it holds a layer
    that has no built-in form (then only the batch norms folding can reach are folded)."""
    from cvbench.utils.plain_keras import to_plain_keras

    try:
        return to_plain_keras(model)
    except ValueError:
        return model
