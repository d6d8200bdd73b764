"""Tasks: what training, evaluating and benchmarking one kind of model needs, between the
data / models / detection packages below and the Trainer above them.

- `ClassificationTask` (ResNets, Inception V3; `classification.py`) and `DetectionTask`
  (SSD; `detection.py`), both on the protocol of `base.py` (`Task`, `TaskOptions`,
  `TrainData`).
- `top_k_accuracy(k, name)`: the accuracy metric of eval and training validation (a row of
  non-finite logits is wrong on every backend; integer and soft labels), for a `Trainer`'s
  `metrics` too; `accuracy_metrics(num_classes)`: the classifiers' top-1 and (over 5
  classes) top-5.
- `task_for_model(name)` / `make_task(options)`: the task of a model, from the model table's
  task tag (`cvbench.zoo.task_of`), so a new kind of model means a new task class and one
  `TASKS.register` line here.
- `prepare_run(task, ...)` -> `TaskRun`: the task's Trainer and training data, then `fit` and
  `evaluate`: the one path of the CLI, the examples and the demo (`runner.py`). Every run has
  a recipe (`cvbench.tasks.recipes`): the model's default, or a named one
  (`TaskOptions(recipe="resnet50_v1.5_90e")`), with the user's settings resolved into it
  once (`TaskOptions(settings={"lr": 0.1})`, each a recorded deviation); the task and the run
  take every knob from it, scaled to the run's global batch (`TaskRun.plan`).

Importing this package imports no TensorFlow; tasks train on synthetic data under any Keras
backend.
"""

from __future__ import annotations

from typing import Any

from cvbench.registry import Registry
from cvbench.tasks.base import Task, TaskOptions, TrainData
from cvbench.tasks.classification import ClassificationTask, accuracy_metrics, top_k_accuracy
from cvbench.tasks.detection import DetectionTask
from cvbench.tasks.runner import TaskRun, build_trainer, prepare_run
from cvbench.zoo import CLASSIFICATION, DETECTION, task_of

TASKS: Registry[Any] = Registry("task")
TASKS.register(CLASSIFICATION, ClassificationTask)
TASKS.register(DETECTION, DetectionTask)


def task_for_model(model: str) -> type:
    """The task class of `model` (from its entry in the model table).

    Raises:
        ValueError: naming the model and listing every known model.
    """
    return TASKS.get(task_of(model))


def make_task(options: TaskOptions, **kwargs: Any) -> Task:
    """The task of `options.model`, built with `options` and the task's own keyword
    arguments (e.g. `DetectionTask`'s `backbone_weights`)."""
    return task_for_model(options.model)(options, **kwargs)


__all__ = [
    "TASKS",
    "ClassificationTask",
    "DetectionTask",
    "Task",
    "TaskOptions",
    "TaskRun",
    "TrainData",
    "build_trainer",
    "make_task",
    "prepare_run",
    "task_for_model",
    "accuracy_metrics",
    "top_k_accuracy",
]
