"""Timed Keras workloads on one synthetic batch that stays on the device.

- `cvbench_model`: what `cvbench train` would build for a model name or a task (its task's
  builder, loss and recipe, `cvbench.tasks`), without touching any data pipeline (so without
  TensorFlow on JAX).
- `synthetic_batch`: the task's random batch on the device: `(images, labels)` for
  classifiers, `(images, {"boxes", "classes"})` real SSD targets for SSD320.
- `make_trainer`: a `Trainer` for the model (precision, optimizer and loss scaling exactly
  as `cvbench train`), XLA-compiled unless Horovod runs.
- Workloads (`cvbench.training.throughput.Workload`): `TrainSteps` (the Trainer's model
  driven by `TrainStepRunner`) and `Forward` (compiled forward pass, optionally followed by
  host post-processing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import keras

from cvbench.benchmark.steps import TrainStepRunner, make_forward, resolve_jit_compile
from cvbench.training.config import OptimizerConfig, ScheduleConfig
from cvbench.training.inputs import split_batch
from cvbench.training.throughput import block


@dataclass(frozen=True)
class CvbenchModel:
    """A cvbench model as `cvbench train` sets it up: its task, and how to build it.

    Attributes:
        name: model name ("resnet50", "inception_v3", "ssd320", ...).
        task: its task (`cvbench.tasks.make_task`): size, classes, loss, recipe and
            synthetic batch.
        build: builds the model (called under the precision policy); the task's
            `build_model` unless replaced (`dataclasses.replace`, e.g. a variant of it).
    """

    name: str
    task: Any
    build: Callable[[], keras.Model] | None = None

    def __post_init__(self) -> None:
        if self.build is None:
            object.__setattr__(self, "build", self.task.build_model)

    @property
    def kind(self) -> str:
        """The task's name: "classification" or "detection"."""
        return self.task.name

    @property
    def image_size(self) -> int:
        """Input height and width."""
        return self.task.image_size

    @property
    def num_classes(self) -> int:
        """Classes (1000 for ImageNet, 90 for SSD320 on COCO)."""
        return self.task.num_classes

    @property
    def loss(self) -> Callable:
        """A new `loss(y_true, y_pred)` of the task."""
        return self.task.loss()

    @property
    def optimizer(self) -> OptimizerConfig:
        """The recipe's update rule."""
        return self.task.recipe.optimizer

    @property
    def schedule(self) -> ScheduleConfig:
        """The recipe's learning-rate schedule."""
        return self.task.recipe.schedule

    @property
    def loss_scaling(self) -> dict[str, Any]:
        """The recipe's loss scaling (`TrainConfig` fields)."""
        from cvbench.tasks.recipes.plan import loss_scaling

        return loss_scaling(self.task.recipe)


def cvbench_model(
    name: str | Any,
    *,
    image_size: int | None = None,
    num_classes: int | None = None,
) -> CvbenchModel:
    """The model, loss and recipe `cvbench train --model name` uses: its task's, with the
    model's recipe and the sizes given; `name` may also be a task already made
    (`cvbench.tasks.make_task`, e.g. with another recipe; the sizes are then its own).

    Raises:
        ValueError: for an unknown model name (listing the known ones) or a bad size.
    """
    if not isinstance(name, str):
        return CvbenchModel(name=name.options.model, task=name)
    from cvbench.tasks import TaskOptions, make_task

    options = TaskOptions(model=name, image_size=image_size, num_classes=num_classes)
    return CvbenchModel(name=name, task=make_task(options))


def to_device(tree: Any) -> Any:
    """Copies NumPy arrays to the default device once (TensorFlow: the first GPU if any)."""
    if keras.config.backend() == "tensorflow":
        import tensorflow as tf

        device = "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"
        with tf.device(device):
            return keras.tree.map_structure(lambda a: tf.identity(tf.convert_to_tensor(a)), tree)
    return keras.tree.map_structure(keras.ops.convert_to_tensor, tree)


def synthetic_batch(
    model: CvbenchModel, batch_size: int, *, seed: int = 0, on_device: bool = True
) -> tuple[Any, Any]:
    """One random training batch for `model`: its task's `synthetic_batch`.

    Classification: images drawn from N(0, 1) (normalized pixels) and uniform labels, as
    `cvbench.data.synthetic_arrays`. Detection: pixels uniform in [0, 255] and two random
    boxes with random classes per image, encoded into SSD targets over the model's anchors.

    Returns:
        `(images float32 (B, H, W, 3), labels int32 (B,))` or
        `(images, {"boxes": (B, N, 5), "classes": (B, N, C + 1)})`, on the device unless
        `on_device` is False (NumPy).

    Raises:
        ValueError: for a non-positive batch size.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    batch = model.task.synthetic_batch(batch_size, seed)
    return to_device(batch) if on_device else batch


def make_trainer(
    model: CvbenchModel,
    *,
    precision: str,
    jit_compile: bool | str = "auto",
    distribution: Any = "auto",
    seed: int = 0,
) -> Any:
    """A `Trainer` for `model` with its recipe's optimizer, schedule and loss scaling and no
    logging, as `cvbench train` builds it.

    Args:
        model: the model to train.
        precision: "fp32", "bf16", "fp16", the policy names or "auto".
        jit_compile: XLA-compile the train step; "auto": `resolve_jit_compile` (JAX, or
            TensorFlow with a GPU, and not under Horovod).
        distribution: as `Trainer`'s.
        seed: seeds the model's initialization.
    """
    from cvbench.training import TrainConfig, Trainer
    from cvbench.training.distributed import get_distribution

    dist = get_distribution(distribution)
    jit_compile = resolve_jit_compile(jit_compile, ranks=dist.size)
    config = TrainConfig(
        log_every=0,
        progress_bar=False,
        seed=seed,
        export=False,
        jit_compile=jit_compile,
        **model.loss_scaling,
    )
    trainer = Trainer(
        model.build,
        model.loss,
        model.optimizer,
        schedule=model.schedule,
        precision=precision,
        distribution=dist,
        config=config,
    )
    return trainer


class TrainSteps:
    """Training steps of a compiled model, without per-step host syncs.

    The first step is `train_on_batch` (builds and compiles); the others go through
    `TrainStepRunner`. `close()` writes the state back to the model.

    Args:
        model: the compiled model (a Trainer's `training_model`).
        batches: an iterable of `(x, y)` or `(x, y, sample_weight)` batches;
            `itertools.repeat(batch)` for a fixed batch.
        images_per_step: images in one step over all ranks.
    """

    def __init__(self, model: keras.Model, batches: Iterable, images_per_step: int) -> None:
        self.model = model
        self._batches = iter(batches)
        self.images_per_step = images_per_step
        self._runner: TrainStepRunner | None = None

    def _next(self) -> tuple[Any, Any, Any]:
        try:
            return split_batch(next(self._batches))
        except StopIteration:
            raise RuntimeError("the training batches ran out during the benchmark") from None

    def first_step(self) -> None:
        x, y, sample_weight = self._next()
        self.model.train_on_batch(x, y, sample_weight=sample_weight)
        self._runner = TrainStepRunner(self.model)

    def run(self, steps: int) -> None:
        if self._runner is None:
            raise RuntimeError("call first_step() before run()")
        logs = None
        for _ in range(steps):
            logs = self._runner.step(*self._next())
        block(logs)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.sync()


class Forward:
    """Compiled inference forward passes on a fixed batch, optionally post-processed.

    Without `postprocess`, `run(n)` dispatches `n` passes and waits for the last. With it
    (e.g. SSD's NMS on the host), pass `i + 1` is dispatched before pass `i` is
    post-processed, so the device works while the host runs NMS.

    Args:
        model: the model.
        images: the input batch (on the device).
        jit_compile: XLA-compile the pass (TensorFlow); "auto": `resolve_jit_compile`.
        postprocess: `outputs -> anything`, run on the host after each pass; None: none.
    """

    def __init__(
        self,
        model: keras.Model,
        images: Any,
        *,
        jit_compile: bool | str = "auto",
        postprocess: Callable[[Any], Any] | None = None,
    ) -> None:
        self.images = images
        self.images_per_step = int(images.shape[0])
        self.forward = make_forward(model, jit_compile=resolve_jit_compile(jit_compile))
        self.postprocess = postprocess

    def call(self) -> None:
        """One synced pass (and its post-processing): what a latency sample times."""
        outputs = self.forward(self.images)
        if self.postprocess is not None:
            self.postprocess(outputs)
        else:
            block(outputs)

    def first_step(self) -> None:
        self.call()

    def run(self, steps: int) -> None:
        if self.postprocess is None:
            outputs = None
            for _ in range(steps):
                outputs = self.forward(self.images)
            block(outputs)
            return
        pending = self.forward(self.images)
        for i in range(steps):
            following = self.forward(self.images) if i + 1 < steps else None
            self.postprocess(pending)
            pending = following

    def close(self) -> None:
        pass
