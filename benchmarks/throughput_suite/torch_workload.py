"""torchvision's `resnet50` / `inception_v3` trained or run as NVIDIA's PyTorch scripts do.

Eager mode, automatic mixed precision (`torch.autocast`, `GradScaler` for float16),
channels_last memory. The suite runs this in a process of its own (`workload_process`), so
this file imports only the standard library at the top and PyTorch when a workload is built:
never Keras, TensorFlow or cvbench.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

#: cvbench model name -> torchvision builder name.
TORCHVISION = {"resnet50": "resnet50", "inception_v3": "inception_v3"}
#: How to get PyTorch and torchvision, in the errors that say they are missing.
INSTALL_HINT = (
    "the torchvision reference needs PyTorch and torchvision: pip install torch torchvision "
    "(for the GPU build see pytorch.org)"
)
#: Keras policy name -> autocast dtype (None: float32, no autocast).
TORCH_DTYPES = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16", "float32": None}


def _forget_torchvision() -> None:
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]


def check_model(model: str) -> None:
    """Raises ValueError for a model without a torchvision counterpart."""
    if model not in TORCHVISION:
        raise ValueError(f"no torchvision reference for {model!r}; known: {sorted(TORCHVISION)}")


def import_torch() -> tuple[Any, Any]:
    """Imports `torch` and `torchvision`, or says how to install them.

    PyPI's torchvision wheel registers its C++ operators (`torchvision::nms`, ...) against the
    CUDA build of torch; with a CPU build (`torch==2.13.0+cpu`) importing it fails in
    `torchvision._meta_registrations`. The classification models are plain `torch.nn` and need
    none of those operators, so that one module is replaced by an empty one and the import
    retried; any other failure is raised as it is.

    Raises:
        ImportError: when either is missing.
    """
    try:
        torch = importlib.import_module("torch")
        try:
            torchvision = importlib.import_module("torchvision")
        except RuntimeError as e:
            if "torchvision::" not in str(e):
                raise
            _forget_torchvision()
            name = "torchvision._meta_registrations"
            sys.modules[name] = types.ModuleType(name)
            torchvision = importlib.import_module("torchvision")
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e
    return torch, torchvision


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
        policy: "mixed_float16", "mixed_bfloat16" or "float32" (the autocast dtype).
        training: train steps (True) or inference passes (False).
        momentum, nesterov, weight_decay: the SGD update's.
        channels_last: NHWC memory format for the model and the batch.
        seed: seeds the batch and the initialization.
        compile: run the model through `torch.compile` (TorchInductor, default mode), as a
            PyTorch user who wants its fastest step writes it; the first step compiles.

    Raises:
        ValueError: for a model without a torchvision counterpart or an unknown policy.
        ImportError: without PyTorch/torchvision.
    """

    def __init__(
        self,
        model: str,
        *,
        batch_size: int,
        image_size: int,
        num_classes: int,
        policy: str,
        training: bool,
        momentum: float = 0.9,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        channels_last: bool = True,
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        check_model(model)
        if policy not in TORCH_DTYPES:
            raise ValueError(f"policy must be one of {sorted(TORCH_DTYPES)}, got {policy!r}")
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
        # the module that runs the steps: the model itself, or its compiled wrapper (which
        # shares its parameters, so the optimizer below updates what it computes with)
        self.forward = torch.compile(self.net) if compile else self.net
        self.x = torch.randn(batch_size, 3, image_size, image_size, device=self.device)
        self.x = self.x.contiguous(memory_format=memory_format)
        self.y = torch.randint(0, num_classes, (batch_size,), device=self.device)
        dtype_name = TORCH_DTYPES[policy]
        self.dtype = getattr(torch, dtype_name) if dtype_name else None
        self.training = training
        self.images_per_step = batch_size
        self.net.train(training)
        if training:
            self.optimizer = torch.optim.SGD(
                self.net.parameters(),
                lr=0.01,
                momentum=momentum,
                nesterov=nesterov,
                weight_decay=weight_decay,
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
                loss = self.loss_fn(self.forward(self.x), self.y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            with self.torch.inference_mode(), self._autocast():
                self.forward(self.x)

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
        del self.net, self.forward
        if self.device == "cuda":
            self.torch.cuda.empty_cache()
