"""cvbench: train, evaluate and benchmark convolutional networks with Keras 3.

The main names of each layer are here, imported lazily on first use, so `import cvbench`
stays cheap and imports neither TensorFlow nor Keras (the models and the single-process
Trainer also run on the JAX backend):

- models: `get_model`, `list_models`, `list_classifiers` (the model table, `cvbench.zoo`),
  `ssd320`;
- data: `imagenet_dataset`, `coco_dataset`, `tfds_dataset`, `synthetic_dataset`,
  `build_imagenet`, `build_coco`, `CocoLabelMap`, `DatasetInfo`,
  `read_dataset_info`;
- tasks: `ClassificationTask`, `DetectionTask`, `TaskOptions`, `make_task`, `prepare_run`;
- training: `Trainer`, `TrainConfig`, `OptimizerConfig`, `ScheduleConfig`;
- evaluation: `evaluate_coco`, `predict_coco`;
- inference: `classify`, `detect`, `ModelInfo`, `load_model`, `save_model`.

See docs/architecture.md for the layers and where each concept lives.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "get_model": "cvbench.zoo",
    "list_models": "cvbench.zoo",
    "list_classifiers": "cvbench.zoo",
    "ssd320": "cvbench.detection.ssd",
    "imagenet_dataset": "cvbench.data",
    "coco_dataset": "cvbench.data",
    "tfds_dataset": "cvbench.data",
    "synthetic_dataset": "cvbench.data",
    "build_imagenet": "cvbench.data",
    "build_coco": "cvbench.data",
    "CocoLabelMap": "cvbench.data",
    "DatasetInfo": "cvbench.data",
    "read_dataset_info": "cvbench.data",
    "ClassificationTask": "cvbench.tasks",
    "DetectionTask": "cvbench.tasks",
    "TaskOptions": "cvbench.tasks",
    "make_task": "cvbench.tasks",
    "prepare_run": "cvbench.tasks",
    "Trainer": "cvbench.training",
    "TrainConfig": "cvbench.training",
    "OptimizerConfig": "cvbench.training",
    "ScheduleConfig": "cvbench.training",
    "evaluate_coco": "cvbench.detection.coco_eval",
    "predict_coco": "cvbench.detection.predict",
    "classify": "cvbench.inference",
    "detect": "cvbench.inference",
    "ModelInfo": "cvbench.inference",
    "load_model": "cvbench.inference",
    "save_model": "cvbench.inference",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cvbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(_LAZY) | {n for n in globals() if n.startswith("__")})
