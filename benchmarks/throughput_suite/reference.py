"""The references cvbench is measured against, built and run the way their users do.

- keras.applications `ResNet50` / `InceptionV3` (random weights), compiled with Keras' own
  defaults (`jit_compile="auto"`, softmax outputs with `SparseCategoricalCrossentropy`, SGD
  with the recipe's momentum) and trained with plain `model.fit` (`FitReference`) or run
  with plain `model.predict` (`PredictReference`); the same backend, precision policy and
  batch as the cvbench run.
- torchvision `resnet50` / `inception_v3` (no auxiliary head) in PyTorch eager mode with
  automatic mixed precision (`torch.autocast`, `GradScaler` for float16) and channels_last
  memory, as NVIDIA's PyTorch scripts run them. PyTorch is imported only here and only when
  such a workload is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import keras

from cvbench.training.config import OptimizerConfig, canonical_precision
from cvbench.training.precision import dtype_policy_scope

#: The references' implementation names in results and tables.
KERAS = "keras.applications"
TORCH = "torchvision"
#: cvbench model name -> keras.applications class name.
KERAS_APPLICATIONS = {"resnet50": "ResNet50", "inception_v3": "InceptionV3"}
#: cvbench model name -> torchvision builder name.
TORCHVISION = {"resnet50": "resnet50", "inception_v3": "inception_v3"}


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


def import_torch() -> tuple[Any, Any]:
    """Imports `torch` and `torchvision`, or says how to install them.

    Raises:
        ImportError: when either is missing.
    """
    try:
        return importlib.import_module("torch"), importlib.import_module("torchvision")
    except ImportError as e:
        raise ImportError(
            "the torchvision reference needs PyTorch and torchvision: pip install torch "
            f"torchvision (for the GPU build see pytorch.org) ({e})"
        ) from e


_TORCH_DTYPES = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16", "float32": None}


class TorchWorkload:
    """A torchvision model on a fixed random batch: training steps or inference passes.

    Training: `zero_grad`, forward and loss under `torch.autocast`, backward through
    `GradScaler` (enabled for float16), optimizer step: NVIDIA's PyTorch AMP loop. Inference:
    `eval()` mode under `torch.inference_mode()` and autocast. Runs on CUDA when available.

    Args:
        model: "resnet50" or "inception_v3".
        batch_size: images per step.
        image_size: input height and width.
        num_classes: classifier width.
        precision: "fp16"/"bf16"/"fp32" or policy names (autocast dtype).
        training: train steps (True) or inference passes (False).
        optimizer: momentum, Nesterov and weight decay of the SGD update.
        channels_last: NHWC memory format for the model and the batch.
        seed: seeds the batch and the initialization.

    Raises:
        ValueError: for a model without a torchvision counterpart.
        ImportError: without PyTorch/torchvision.
    """

    def __init__(
        self,
        model: str,
        *,
        batch_size: int,
        image_size: int,
        num_classes: int,
        precision: str,
        training: bool,
        optimizer: OptimizerConfig | None = None,
        channels_last: bool = True,
        seed: int = 0,
    ) -> None:
        if model not in TORCHVISION:
            raise ValueError(
                f"no torchvision reference for {model!r}; known: {sorted(TORCHVISION)}"
            )
        torch, torchvision = import_torch()
        self.torch = torch
        torch.manual_seed(seed)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda":
            torch.backends.cudnn.benchmark = True
        kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
        if model == "inception_v3":
            kwargs.update(aux_logits=False, init_weights=False)
        net = getattr(torchvision.models, TORCHVISION[model])(**kwargs)
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.net = net.to(self.device, memory_format=memory_format)
        self.x = torch.randn(batch_size, 3, image_size, image_size, device=self.device)
        self.x = self.x.contiguous(memory_format=memory_format)
        self.y = torch.randint(0, num_classes, (batch_size,), device=self.device)
        dtype_name = _TORCH_DTYPES[canonical_precision(precision)]
        self.dtype = getattr(torch, dtype_name) if dtype_name else None
        self.training = training
        self.images_per_step = batch_size
        self.net.train(training)
        if training:
            opt = optimizer or OptimizerConfig()
            self.optimizer = torch.optim.SGD(
                self.net.parameters(),
                lr=0.01,
                momentum=opt.momentum,
                nesterov=opt.nesterov,
                weight_decay=opt.weight_decay,
            )
            self.loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
            self.scaler = torch.amp.GradScaler(self.device, enabled=self.dtype is torch.float16)

    def _autocast(self) -> Any:
        return self.torch.autocast(
            device_type=self.device, dtype=self.dtype, enabled=self.dtype is not None
        )

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _step(self) -> None:
        if self.training:
            self.optimizer.zero_grad(set_to_none=True)
            with self._autocast():
                loss = self.loss_fn(self.net(self.x), self.y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            with self.torch.inference_mode(), self._autocast():
                self.net(self.x)

    def call(self) -> None:
        """One synced step (a latency sample)."""
        self._step()
        self._sync()

    def first_step(self) -> None:
        self.call()

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self._step()
        self._sync()

    def close(self) -> None:
        del self.net
        if self.device == "cuda":
            self.torch.cuda.empty_cache()
