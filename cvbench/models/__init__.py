"""The model zoo: keyword-only builders in one explicit registry.

    >>> from cvbench.models import get_model, list_models
    >>> "resnet50" in list_models()
    True
    >>> model = get_model("resnet18", num_classes=10, input_shape=(64, 64, 3))
    >>> model.output_shape
    (None, 10)

Every name below is registered by an explicit call in this file; nothing registers itself on
import. This package uses `keras.layers` / `keras.ops` only, so it works on any Keras backend.
"""

from __future__ import annotations

from typing import Any

import keras

from cvbench.models import inception_v3 as _inception_v3
from cvbench.models import resnet as _resnet
from cvbench.registry import Registry

MODELS: Registry[keras.Model] = Registry("model")
MODELS.register("resnet18", _resnet.resnet18)
MODELS.register("resnet34", _resnet.resnet34)
MODELS.register("resnet50", _resnet.resnet50)
MODELS.register("resnet101", _resnet.resnet101)
MODELS.register("resnet152", _resnet.resnet152)
MODELS.register("inception_v3", _inception_v3.inception_v3)


def _ssd320(**kwargs: Any) -> keras.Model:
    """`cvbench.detection.ssd320` (imported on use: detection builds on this package)."""
    from cvbench.detection.ssd import ssd320

    return ssd320(**kwargs)


MODELS.register("ssd320", _ssd320)
DETECTORS = ("ssd320",)


def get_model(name: str, **kwargs: Any) -> keras.Model:
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


def list_models() -> list[str]:
    """The registered model names, sorted (classifiers and detectors)."""
    return MODELS.names()


def list_classifiers() -> list[str]:
    """The registered classification models, sorted (`list_models()` minus the detectors)."""
    return [name for name in MODELS.names() if name not in DETECTORS]


__all__ = ["DETECTORS", "MODELS", "get_model", "list_classifiers", "list_models"]
