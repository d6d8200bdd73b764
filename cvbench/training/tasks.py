"""Tasks: what `cvbench train / eval / benchmark` need to know about a kind of model.

A task bundles, for the models it covers, the model builder, the loss, the metrics, the
reference recipe and the data. The CLI picks the task from the model name
(`task_for_model`), so adding a kind of model (detection) means adding a task class and one
`TASKS.register` line below, not touching the commands.

The Task protocol (what a task class provides):

    class MyTask:
        name: str                                   # e.g. "classification"

        @classmethod
        def models(cls) -> list[str]: ...           # model names this task covers

        def __init__(self, options: TaskOptions): ...

        def build_model(self) -> keras.Model
            # Called by the Trainer with the precision policy in force.
        def loss(self) -> Callable                  # loss(y_true, y_pred) -> scalar
        def metrics(self) -> list                   # Keras metrics for training/evaluation
        def recipe(self) -> tuple[OptimizerConfig, ScheduleConfig]
            # the reference settings; the CLI overrides single fields from flags.
        def train_data(self, *, batch_size, num_shards, shard_index, seed) -> TrainData
            # this rank's training batches: arrays, a re-iterable, or epoch -> batches
            # (see cvbench.training.inputs) and the steps per epoch.
        def evaluate(self, trainer, *, batch_size, num_shards, shard_index) -> dict[str, float]
            # the task's evaluation over the whole validation set (every rank calls it;
            # results identical on every rank), e.g. top-1/top-5 or COCO AP.

`batch_size` is per rank; `num_shards`/`shard_index` are the Trainer's size and rank.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import keras

from cvbench.detection.task import DetectionTask
from cvbench.registry import Registry
from cvbench.training.config import OptimizerConfig, ScheduleConfig
from cvbench.training.losses import SparseCrossEntropy


@dataclass(frozen=True)
class TaskOptions:
    """What the user chose about the task (from CLI flags).

    Attributes:
        model: model name (one of the task's `models()`).
        data_dir: directory of TFRecords; None means synthetic data.
        image_size: input height and width; None: the model's default.
        num_classes: classifier width; None: the dataset's (1000 for ImageNet).
        label_smoothing: classification label smoothing; None: the recipe's (0.1).
        synthetic_steps: steps per epoch on synthetic data.
    """

    model: str
    data_dir: str | None = None
    image_size: int | None = None
    num_classes: int | None = None
    label_smoothing: float | None = None
    synthetic_steps: int = 100

    def __post_init__(self) -> None:
        for name in ("image_size", "num_classes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.synthetic_steps, int) or self.synthetic_steps < 1:
            raise ValueError(
                f"synthetic_steps must be a positive int, got {self.synthetic_steps!r}"
            )


@dataclass(frozen=True)
class TrainData:
    """A rank's training data and the number of steps in an epoch."""

    data: Any
    steps_per_epoch: int


class Task(Protocol):
    """See the module docstring."""

    name: str

    def build_model(self) -> keras.Model: ...

    def loss(self) -> Callable: ...

    def metrics(self) -> list: ...

    def recipe(self) -> tuple[OptimizerConfig, ScheduleConfig]: ...

    def train_data(
        self, *, batch_size: int, num_shards: int, shard_index: int, seed: int | None
    ) -> TrainData: ...

    def evaluate(
        self, trainer: Any, *, batch_size: int, num_shards: int, shard_index: int
    ) -> dict[str, float]: ...


# NVIDIA's recipes (specs: training recipes). Base rates are per 256 images.
_RESNET_RECIPE = (
    OptimizerConfig(name="sgd", momentum=0.875, weight_decay=3.0517578125e-05),
    ScheduleConfig(base_lr=0.256, warmup_epochs=8, decay="cosine"),
)
# The older Horovod script: LR 2.0 at 8 x 256 (RN50) and 1.0 at 8 x 128 (IncV3) = 0.25 / 256;
# it decays every variable.
_INCEPTION_RECIPE = (
    OptimizerConfig(
        name="lars",
        momentum=0.9,
        nesterov=True,
        weight_decay=1e-4,
        decay_batchnorm=True,
        decay_bias=True,
        larc_eta=0.003,
        larc_mode="clip",
    ),
    ScheduleConfig(base_lr=0.25, decay="polynomial", power=2.0),
)
_DEFAULT_SIZES = {"inception_v3": 299}
IMAGENET_CLASSES = 1000
SYNTHETIC_EVAL_BATCHES = 2


class ClassificationTask:
    """ImageNet classification (ResNets, Inception V3): cross-entropy, top-1/top-5.

    Args:
        options: the task options; `data_dir` holds ImageNet-format TFRecords
            (`train-*`, `validation-*`), or None for synthetic data.
    """

    name = "classification"

    @classmethod
    def models(cls) -> list[str]:
        from cvbench.models import list_classifiers

        return list_classifiers()

    def __init__(self, options: TaskOptions) -> None:
        if options.model not in self.models():
            raise ValueError(
                f"unknown classification model {options.model!r}; known: {', '.join(self.models())}"
            )
        self.options = options
        self.image_size = options.image_size or _DEFAULT_SIZES.get(options.model, 224)
        self.num_classes = options.num_classes or IMAGENET_CLASSES

    def build_model(self) -> keras.Model:
        from cvbench.models import get_model

        return get_model(
            self.options.model,
            num_classes=self.num_classes,
            input_shape=(self.image_size, self.image_size, 3),
            classifier_activation=None,
        )

    def loss(self) -> Callable:
        smoothing = self.options.label_smoothing
        return SparseCrossEntropy(label_smoothing=0.1 if smoothing is None else smoothing)

    def metrics(self) -> list:
        return [
            keras.metrics.SparseCategoricalAccuracy(name="top1"),
            keras.metrics.SparseTopKCategoricalAccuracy(k=5, name="top5"),
        ]

    def recipe(self) -> tuple[OptimizerConfig, ScheduleConfig]:
        return _INCEPTION_RECIPE if self.options.model.startswith("inception") else _RESNET_RECIPE

    def _synthetic_batch(self, batch_size: int, seed: int) -> Any:
        """One fixed random batch: a tf.data dataset repeating it, or NumPy arrays."""
        if keras.config.backend() == "tensorflow":
            from cvbench.data import synthetic_dataset

            return synthetic_dataset(batch_size, self.image_size, self.num_classes, seed=seed)
        from cvbench.data import synthetic_arrays

        arrays = synthetic_arrays(batch_size, self.image_size, self.num_classes, seed=seed)
        # On the accelerator once, so that steps do not copy the batch from the host.
        return tuple(keras.ops.convert_to_tensor(a) for a in arrays)

    def _synthetic(self, batch_size: int, seed: int, steps: int) -> Any:
        """An epoch function yielding the synthetic batch `steps` times."""
        batch = self._synthetic_batch(batch_size, seed)
        if isinstance(batch, tuple):
            return lambda epoch: itertools.repeat(batch, steps)
        return lambda epoch: batch.take(steps)

    def train_data(
        self, *, batch_size: int, num_shards: int, shard_index: int, seed: int | None
    ) -> TrainData:
        steps = self.options.synthetic_steps
        if self.options.data_dir is None:
            return TrainData(self._synthetic(batch_size, seed or 0, steps), steps)
        from cvbench.data import imagenet_dataset, num_examples

        data_dir = self.options.data_dir
        steps = num_examples(data_dir, "train") // (batch_size * num_shards)
        if steps < 1:
            raise ValueError(
                f"{data_dir} has fewer training images than one global batch of "
                f"{batch_size * num_shards}"
            )

        def epoch_data(epoch: int):
            return imagenet_dataset(
                data_dir,
                "train",
                batch_size=batch_size,
                image_size=self.image_size,
                training=True,
                num_shards=num_shards,
                shard_index=shard_index,
                seed=None if seed is None else seed + epoch,
            )

        return TrainData(epoch_data, steps)

    def evaluate(
        self, trainer: Any, *, batch_size: int, num_shards: int, shard_index: int
    ) -> dict[str, float]:
        """Top-1/top-5 over the whole validation split (padding rows weigh 0)."""
        if self.options.data_dir is None:
            data = self._synthetic(batch_size, 1, SYNTHETIC_EVAL_BATCHES)(0)
            data = data if hasattr(data, "take") else list(data)
        else:
            from cvbench.data import imagenet_dataset

            data = imagenet_dataset(
                self.options.data_dir,
                "validation",
                batch_size=batch_size,
                image_size=self.image_size,
                training=False,
                num_shards=num_shards,
                shard_index=shard_index,
            )
        return trainer.evaluate(data)


TASKS: Registry[type] = Registry("task")
TASKS.register("classification", ClassificationTask)
TASKS.register("detection", DetectionTask)


def task_for_model(model: str) -> type:
    """The task class covering `model`.

    Raises:
        ValueError: naming the model and listing every known model.
    """
    known = []
    for name in TASKS:
        task_cls = TASKS.get(name)
        names = task_cls.models()
        if model in names:
            return task_cls
        known.extend(names)
    raise ValueError(f"unknown model {model!r}; known: {', '.join(sorted(known))}")
