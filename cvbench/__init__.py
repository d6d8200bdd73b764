"""cvbench: train, evaluate and benchmark convolutional networks with Keras 3.

The top-level names are imported lazily, so `import cvbench` stays cheap and imports no
TensorFlow (the models and the single-process Trainer also run on the JAX backend).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Trainer": "cvbench.training",
    "TrainConfig": "cvbench.training",
    "OptimizerConfig": "cvbench.training",
    "ScheduleConfig": "cvbench.training",
    "get_model": "cvbench.models",
    "list_models": "cvbench.models",
    "list_classifiers": "cvbench.models",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cvbench' has no attribute {name!r}")
