"""The references cvbench is measured against, built and run the way their users do.

- keras.applications `ResNet50` / `InceptionV3` (random weights), compiled with Keras' own
  defaults (`jit_compile="auto"`, softmax outputs with `SparseCategoricalCrossentropy`, SGD
  with the recipe's momentum) and trained with plain `model.fit` (`FitReference`) or run
  with plain `model.predict` (`PredictReference`); the same backend, precision policy and
  batch as the cvbench run.
- torchvision `resnet50` / `inception_v3` (no auxiliary head) in PyTorch eager mode with
  automatic mixed precision and channels_last memory, as NVIDIA's PyTorch scripts run them
  (`torch_workload.TorchWorkload`), in a process of its own (`torch_reference`): PyTorch is
  never imported into the process that runs Keras; and the same through `torch.compile`
  (`TORCH_COMPILE`), the fastest step a PyTorch user writes without hand-written kernels.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import keras

from cvbench.training.config import OptimizerConfig, canonical_precision
from cvbench.training.precision import dtype_policy_scope

from . import torch_workload
from .torch_workload import TORCHVISION
from .workload_process import ProcessWorkload

#: The references' implementation names in results and tables.
KERAS = "keras.applications"
TORCH = "torchvision"
TORCH_COMPILE = "torch.compile"
#: cvbench model name -> keras.applications class name.
KERAS_APPLICATIONS = {"resnet50": "ResNet50", "inception_v3": "InceptionV3"}


def has_reference(model: str, kind: str) -> bool:
    """Whether `kind` ("keras" or "torch") has a reference model for cvbench's `model`."""
    table = {"keras": KERAS_APPLICATIONS, "torch": TORCHVISION}.get(kind)
    if table is None:
        raise ValueError(f"reference kind must be 'keras' or 'torch', got {kind!r}")
    return model in table


def keras_application(
    model: str, *, image_size: int, num_classes: int, precision: str
) -> keras.Model:
    """The keras.applications counterpart of `model`, random weights, built under `precision`.

    Raises:
        ValueError: when keras.applications has no counterpart.
    """
    if model not in KERAS_APPLICATIONS:
        raise ValueError(
            f"no keras.applications reference for {model!r}; known: {sorted(KERAS_APPLICATIONS)}"
        )
    builder = getattr(keras.applications, KERAS_APPLICATIONS[model])
    with dtype_policy_scope(canonical_precision(precision)):
        return builder(weights=None, input_shape=(image_size, image_size, 3), classes=num_classes)


def compile_plain(model: keras.Model, optimizer: OptimizerConfig, learning_rate: float) -> None:
    """`model.compile` as a Keras user writes it: Keras SGD, sparse cross-entropy on the
    softmax outputs, Keras' defaults for everything else (mixed_float16 gets Keras' own
    loss scaling)."""
    model.compile(
        optimizer=keras.optimizers.SGD(
            learning_rate,
            momentum=optimizer.momentum,
            nesterov=optimizer.nesterov,
            weight_decay=optimizer.weight_decay or None,
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(),
    )


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


def torch_reference(
    model: str,
    *,
    batch_size: int,
    image_size: int,
    num_classes: int,
    precision: str,
    training: bool,
    optimizer: OptimizerConfig | None = None,
    seed: int = 0,
    compile: bool = False,
) -> ProcessWorkload:
    """torchvision's `model` (`torch_workload.TorchWorkload`) built and run in a child process,
    through `torch.compile` with `compile`.

    Both runtimes size their thread pools to the machine; in one process they fight and
    torchvision runs at a fraction of its speed. In its own process it idles while the
    other implementations' windows run.

    Raises:
        ValueError: for a model without a torchvision counterpart.
        ImportError: without PyTorch/torchvision (checked here, before a process starts).
    """
    torch_workload.check_model(model)
    missing = [m for m in ("torch", "torchvision") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"{torch_workload.INSTALL_HINT} (missing: {', '.join(missing)})")
    opt = optimizer or OptimizerConfig()
    kwargs = dict(
        batch_size=batch_size,
        image_size=image_size,
        num_classes=num_classes,
        policy=canonical_precision(precision),
        training=training,
        momentum=opt.momentum,
        nesterov=opt.nesterov,
        weight_decay=opt.weight_decay,
        seed=seed,
        compile=compile,
    )
    factory = f"{torch_workload.__file__}:TorchWorkload"
    name = TORCH_COMPILE if compile else TORCH
    return ProcessWorkload(factory, {"model": model, **kwargs}, name=name)
