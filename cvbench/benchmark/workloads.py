"""Timed Keras workloads on one synthetic batch that stays on the device.

- `cvbench_model`: what `cvbench train` would build for a model name (builder, loss,
  recipe, default size), without touching any data pipeline (so without TensorFlow on JAX).
- `synthetic_batch`: one random batch on the device: `(images, labels)` for classifiers,
  `(images, {"boxes", "classes"})` real SSD targets (`encode_targets`) for SSD320.
- `make_trainer`: a `Trainer` for the model (precision, optimizer and loss scaling exactly
  as `cvbench train`), XLA-compiled unless Horovod runs.
- Workloads (`cvbench.benchmark.timing.Workload`): `TrainSteps` (the Trainer's model driven
  by `TrainStepRunner`), `FitReference` (plain `model.fit`), `Forward` (compiled forward
  pass, optionally followed by host post-processing) and `PredictReference` (plain
  `model.predict`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from cvbench.benchmark.steps import TrainStepRunner, make_forward, resolve_jit_compile
from cvbench.benchmark.timing import block
from cvbench.training.config import OptimizerConfig, ScheduleConfig
from cvbench.training.inputs import split_batch

DETECTION_MODELS = ("ssd320",)


@dataclass(frozen=True)
class CvbenchModel:
    """A cvbench model as `cvbench train` sets it up.

    Attributes:
        name: registry name ("resnet50", "inception_v3", "ssd320", ...).
        kind: "classification" or "detection".
        image_size: input height and width.
        num_classes: classes (1000 for ImageNet, 90 for SSD320 on COCO).
        build: builds the model (called under the precision policy).
        loss: `loss(y_true, y_pred)` of the task.
        optimizer: the recipe's update rule.
        schedule: the recipe's learning-rate schedule.
    """

    name: str
    kind: str
    image_size: int
    num_classes: int
    build: Callable[[], keras.Model]
    loss: Callable
    optimizer: OptimizerConfig
    schedule: ScheduleConfig


def cvbench_model(
    name: str, *, image_size: int | None = None, num_classes: int | None = None
) -> CvbenchModel:
    """The model, loss and recipe `cvbench train --model name` uses.

    Classifiers come from `ClassificationTask`; SSD320 from `detection.ssd.ssd320`,
    `SSDLoss` and the SSD320 recipe (as `DetectionTask`, whose constructor needs the COCO
    reader and so TensorFlow).

    Raises:
        ValueError: for an unknown model name (listing the known ones) or a bad size.
    """
    if name in DETECTION_MODELS:
        from cvbench.detection import task as detection_task
        from cvbench.detection.losses import SSDLoss
        from cvbench.detection.ssd import ssd320

        size = image_size or detection_task.DEFAULT_IMAGE_SIZE
        classes = num_classes or 90
        optimizer, schedule = detection_task.RECIPE
        return CvbenchModel(
            name=name,
            kind="detection",
            image_size=size,
            num_classes=classes,
            build=lambda: ssd320(num_classes=classes, image_size=size),
            loss=SSDLoss(),
            optimizer=optimizer,
            schedule=schedule,
        )
    from cvbench.training.tasks import ClassificationTask, TaskOptions

    if name not in ClassificationTask.models():
        known = sorted([*ClassificationTask.models(), *DETECTION_MODELS])
        raise ValueError(f"unknown model {name!r}; known: {', '.join(known)}")
    task = ClassificationTask(
        TaskOptions(model=name, image_size=image_size, num_classes=num_classes)
    )
    optimizer, schedule = task.recipe()
    return CvbenchModel(
        name=name,
        kind="classification",
        image_size=task.image_size,
        num_classes=task.num_classes,
        build=task.build_model,
        loss=task.loss(),
        optimizer=optimizer,
        schedule=schedule,
    )


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
    """One random training batch for `model`.

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
    size = model.image_size
    if model.kind == "classification":
        from cvbench.data.synthetic import synthetic_arrays

        batch: tuple[Any, Any] = synthetic_arrays(batch_size, size, model.num_classes, seed=seed)
    else:
        batch = _detection_batch(batch_size, size, model.num_classes, seed)
    return to_device(batch) if on_device else batch


def _detection_batch(batch_size: int, size: int, num_classes: int, seed: int) -> tuple:
    from cvbench.detection.anchors import multiscale_anchors
    from cvbench.detection.targets import encode_targets

    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 255, (batch_size, size, size, 3)).astype(np.float32)
    corners = np.sort(rng.uniform(0, 1, (batch_size, 2, 2, 2)), axis=2)  # (y, x) sorted pairs
    boxes = corners.transpose(0, 1, 3, 2).reshape(batch_size, 2, 4)[..., [0, 2, 1, 3]]
    labels = rng.integers(0, num_classes, (batch_size, 2)).astype(np.int32)
    anchors = multiscale_anchors(size)
    per_image = [
        encode_targets(anchors, boxes[i].astype(np.float32), labels[i], num_classes=num_classes)
        for i in range(batch_size)
    ]
    targets = {
        key: np.stack([keras.ops.convert_to_numpy(t[key]) for t in per_image])
        for key in ("boxes", "classes")
    }
    return images, targets


def make_trainer(
    model: CvbenchModel,
    *,
    precision: str,
    jit_compile: bool | str = "auto",
    distribution: Any = "auto",
    seed: int = 0,
) -> Any:
    """A `Trainer` for `model` with its recipe and no logging, as `cvbench train` builds it.

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
        log_every=0, progress_bar=False, seed=seed, export=False, jit_compile=jit_compile
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


def _repeat(batch: Any) -> Iterator[Any]:
    while True:
        yield batch


class FitReference:
    """Plain `model.fit` on a fixed batch: one `fit` call of `steps` steps per `run`.

    The data is what a user of the backend would pass: a repeating `tf.data.Dataset` on
    TensorFlow, a generator of the device-resident batch elsewhere.
    """

    def __init__(self, model: keras.Model, batch: tuple[Any, Any], images_per_step: int):
        self.model = model
        self.batch = batch
        self.images_per_step = images_per_step
        self._dataset = None
        if keras.config.backend() == "tensorflow":
            import tensorflow as tf

            self._dataset = tf.data.Dataset.from_tensors(batch).repeat()

    def _data(self) -> Any:
        return self._dataset if self._dataset is not None else _repeat(self.batch)

    def first_step(self) -> None:
        self.run(1)

    def run(self, steps: int) -> None:
        self.model.fit(self._data(), steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)

    def close(self) -> None:
        pass


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


class PredictReference:
    """Plain `model.predict` over `steps` copies of a fixed batch per `run`."""

    def __init__(self, model: keras.Model, images: Any) -> None:
        self.model = model
        self.images = images
        self.images_per_step = int(images.shape[0])
        self._dataset = None
        if keras.config.backend() == "tensorflow":
            import tensorflow as tf

            self._dataset = tf.data.Dataset.from_tensors(images).repeat()

    def first_step(self) -> None:
        self.run(1)

    def run(self, steps: int) -> None:
        data = self._dataset if self._dataset is not None else _repeat((self.images,))
        self.model.predict(data, steps=steps, verbose=0)

    def close(self) -> None:
        pass
