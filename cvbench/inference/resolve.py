"""A model argument (a Keras model or a `.keras` path) and its `ModelInfo`, checked for a task.

`classify` and `detect` take either a model object, with or without a `ModelInfo`, or the path
of a `.keras` file written by `cvbench.inference.save_model`. A file must carry its info (the
class names and the resize rule are not guessable from the weights); a model object without
one gets the defaults of `default_info`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cvbench.detection.predict import detection_settings
from cvbench.utils.model_file import (
    ModelInfo,
    check_model_matches_info,
    class_names_or_default,
    load_model,
    read_model_info,
    require_model_info,
)


def _input_size(model: Any) -> tuple[int, int]:
    shape = tuple(model.input_shape)
    if len(shape) != 4 or shape[1] is None or shape[2] is None:
        raise ValueError(
            f"a model without ModelInfo needs a fixed input shape (B, H, W, 3); got {shape}; "
            "pass info=ModelInfo(...)"
        )
    return int(shape[1]), int(shape[2])


def _names(class_names: Sequence[str] | None, num_classes: int) -> tuple[str, ...]:
    if class_names is None:
        return tuple(class_names_or_default(None, num_classes))
    if len(class_names) != num_classes:
        raise ValueError(f"the model has {num_classes} classes; got {len(class_names)} class names")
    return tuple(class_names)


def default_info(model: Any, *, task: str, class_names: Sequence[str] | None = None) -> ModelInfo:
    """The `ModelInfo` assumed for a model object passed without one (and a quick way to
    write one for a cvbench-built model).

    Classifiers: the input size of the model, "center_crop" at 0.875. Detectors (outputs
    `{"boxes", "classes"}`, as `cvbench.detection.ssd.build_ssd` builds them): the input
    size, "stretch", SSD320 v1.2's detection settings (`cvbench.detection.detection_settings()`:
    anchors of levels 3-7, scale 4, aspect ratios 1, 2, 0.5, 2 scales per octave; box-coder
    scales; post-processing).

    Args:
        model: a Keras model with a fixed input size.
        task: "classification" or "detection".
        class_names: the class names; default "0", "1", ...

    Raises:
        ValueError: for an unknown task, a model whose input size is not fixed, a detector
            without dict outputs, or class names that do not match the outputs.
    """
    if task not in _KINDS:
        raise ValueError(f"task must be one of {sorted(_KINDS)}; got {task!r}")
    return _KINDS[task].default_info(model, _input_size(model), class_names)


def _classifier_info(
    model: Any, size: tuple[int, int], class_names: Sequence[str] | None
) -> ModelInfo:
    num_classes = int(model.output_shape[-1])
    names = _names(class_names, num_classes)
    return ModelInfo(task="classification", class_names=names, image_size=size)


def _detector_info(
    model: Any, size: tuple[int, int], class_names: Sequence[str] | None
) -> ModelInfo:
    outputs = getattr(model, "output", None)
    if not isinstance(outputs, dict) or "classes" not in outputs:
        raise ValueError(
            'a detector must output a dict {"boxes": box codes, "classes": logits}; pass '
            "info=ModelInfo(...) for another model"
        )
    num_classes = int(outputs["classes"].shape[-1])
    return ModelInfo(
        task="detection",
        class_names=_names(class_names, num_classes),
        image_size=size,
        resize="stretch",
        detection=detection_settings(),
    )


@dataclass(frozen=True)
class _Kind:
    """One kind of model `classify` / `detect` runs: what it is called in messages, and the
    `ModelInfo` a model object of that kind gets by default."""

    noun: str
    default_info: Callable[[Any, tuple[int, int], Sequence[str] | None], ModelInfo]


#: By task, as `ModelInfo.task` (`ModelInfo.head.task`) names it.
_KINDS = {
    "classification": _Kind("classifier", _classifier_info),
    "detection": _Kind("detector", _detector_info),
}


def resolve_model(model: Any, *, info: ModelInfo | None, task: str) -> tuple[Any, ModelInfo]:
    """The Keras model and the `ModelInfo` to run it with.

    Args:
        model: a `keras.Model`, or the path of a `.keras` file (loaded in safe mode).
        info: overrides the file's info; required with a model object (a model object does
            not say what input it expects: `default_info` states the [0, 255] defaults).
        task: "classification" or "detection", the task the caller runs.

    Returns:
        `(keras_model, info)`.

    Raises:
        FileNotFoundError: for a missing model file.
        BadFileError: (a `ValueError`) for a model file that is not a regular file or is
            malformed (`cvbench.utils.model_file.load_model`).
        BadFileError: a file without `ModelInfo` (and no `info`: `require_model_info`).
        ValueError: a model object without `info`, an info of another task, or an `info`
            that contradicts the model (`check_model_matches_info`: an `image_size` that is
            not the model's fixed input size, a class count that is not its outputs').
    """
    if isinstance(model, str | os.PathLike):
        path = Path(model)
        if not path.exists():
            raise FileNotFoundError(f"no model file {path}")
        # before loading: a file without info (and no `info`) is refused fast
        stored = read_model_info(path) if info is not None else require_model_info(path)
        model, _ = load_model(path)  # checks the file's own info
        info = info or stored
    elif info is None:
        name = getattr(model, "name", type(model).__name__)
        raise ValueError(
            f"model {name!r} is a model object without ModelInfo: its input range, resize "
            "and class names are unknown (a trained model may expect normalized input). Pass "
            f"info=cvbench.inference.default_info(model, task={task!r}) for [0, 255] RGB "
            "input, or the path of its .keras file (Trainer.export writes one with its info)"
        )
    if info.task != task:
        raise ValueError(
            f"the model is a {info.task} model (its ModelInfo); {task} needs a {_KINDS[task].noun}"
        )
    check_model_matches_info(model, info)  # its input size, its class count
    return model, info
