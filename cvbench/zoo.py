"""The one model table: every named model, classifiers and detectors, with its task.

    >>> from cvbench.zoo import get_model, list_models, task_of
    >>> list_models(task="detection"), task_of("resnet50")
    (['ssd320'], 'classification')
    >>> get_model("resnet18", num_classes=10, input_shape=(64, 64, 3)).output_shape
    (None, 10)

It sits above `cvbench.models` (classification builders) and `cvbench.detection` (SSD), which
never import it, so there is no import circle: SSD builds its backbone through
`cvbench.models.resnet` directly. Every name is registered by an explicit call below; the
task tag is what `cvbench.tasks.task_for_model` reads to pick the task of a model.

What a model's starting weights bring besides their values (`cvbench.models.pretrained`):
`weights_normalization(name, weights)`, the input normalization they were trained with
(keras.applications' ResNets: caffe, Inception V3: `x / 127.5 - 1`; None for other weights),
and `weights_architecture(name, weights)`, the builder arguments their layers fix. Tasks read
them here.

    >>> weights_normalization("inception_v3", "imagenet").mean
    (127.5, 127.5, 127.5)
"""

from __future__ import annotations

from typing import Any

from cvbench.detection.ssd import ssd320 as _ssd320
from cvbench.models import resnet as _resnet
from cvbench.models.inception_v3 import inception_v3 as _inception_v3
from cvbench.models.pretrained import (
    InputNormalization,
    weights_architecture,
    weights_normalization,
)
from cvbench.registry import Registry

CLASSIFICATION = "classification"
DETECTION = "detection"

MODELS: Registry[Any] = Registry("model")
for _depth in sorted(_resnet.STAGE_BLOCKS):
    MODELS.register(f"resnet{_depth}", getattr(_resnet, f"resnet{_depth}"), task=CLASSIFICATION)
MODELS.register("inception_v3", _inception_v3, task=CLASSIFICATION)
MODELS.register("ssd320", _ssd320, task=DETECTION)


def register(name: str, builder: Any, *, task: str) -> None:
    """Adds a model to the table (a keyword-only builder returning a `keras.Model`).

    Args:
        name: the new name.
        builder: the builder function.
        task: "classification" or "detection" (the task that trains and evaluates it).

    Raises:
        ValueError: for a name already registered or an unknown task.
    """
    if task not in (CLASSIFICATION, DETECTION):
        raise ValueError(f"task must be {CLASSIFICATION!r} or {DETECTION!r}, got {task!r}")
    MODELS.register(name, builder, task=task)


def get_model(name: str, **kwargs: Any) -> Any:
    """Builds the registered model `name` with keyword arguments (see each builder).

    Args:
        name: one of `list_models()`.
        **kwargs: passed to the builder, e.g. `num_classes`, `input_shape`, `weights`.

    Returns:
        A `keras.Model`.

    Raises:
        ValueError: for an unknown name (listing the known ones) or a bad argument.
    """
    return MODELS.build(name, **kwargs)


def list_models(task: str | None = None) -> list[str]:
    """The registered model names, sorted; only those of `task` ("classification",
    "detection") when given."""
    return MODELS.names(task)


def list_classifiers() -> list[str]:
    """The registered classification models, sorted (`list_models(task="classification")`)."""
    return MODELS.names(CLASSIFICATION)


def task_of(name: str) -> str:
    """The task of model `name`: "classification" or "detection" (ValueError if unknown)."""
    return MODELS.task_of(name)


__all__ = [
    "CLASSIFICATION",
    "DETECTION",
    "MODELS",
    "InputNormalization",
    "get_model",
    "list_classifiers",
    "list_models",
    "register",
    "task_of",
    "weights_architecture",
    "weights_normalization",
]
