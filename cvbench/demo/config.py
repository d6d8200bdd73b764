"""Settings of the demo (a frozen dataclass with two presets) and its precision choice."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from cvbench.training.config import TrainConfig
from cvbench.training.precision import BF16_CPU_FLAGS, cpu_flags, resolve_precision

# Re-exported: the CPU checks live with the precision policies.
__all__ = ["BF16_CPU_FLAGS", "DemoConfig", "cpu_flags", "demo_precision"]


@dataclass(frozen=True)
class DemoConfig:
    """Sizes, schedules and seeds of one demo run.

    Attributes:
        cls_image_size: classification image side, pixels.
        cls_train_per_class: classification training images per class.
        cls_val_per_class: classification validation images per class.
        cls_epochs: classifier epochs.
        cls_batch_size: classifier global batch (N Horovod processes take 1/N each).
        cls_lr: classifier peak learning rate (Adam; warmup then cosine).
        det_image_size: detection image side, pixels (the SSD input size).
        det_num_train: detection training images.
        det_num_val: detection validation images (COCO evaluation).
        det_epochs: SSD epochs.
        det_batch_size: SSD global batch.
        det_lr: SSD peak learning rate (Adam; warmup then cosine).
        ssd_depth: channels of the SSD's feature pyramid and head (SSD320 v1.2 uses 256).
        ssd_head_layers: convolutions in each head tower (SSD320 v1.2 uses 4).
        backbone: the ResNet of both models (the SSD starts from the classifier's weights).
        log_every: print and log a training line every this many steps.
        seed: seeds the data generator and the training runs.
    """

    cls_image_size: int = 48
    cls_train_per_class: int = 400
    cls_val_per_class: int = 100
    cls_epochs: int = 2
    cls_batch_size: int = 32
    cls_lr: float = 0.002
    det_image_size: int = 96
    det_num_train: int = 1600
    det_num_val: int = 200
    det_epochs: int = 2
    det_batch_size: int = 16
    det_lr: float = 0.001
    ssd_depth: int = 64
    ssd_head_layers: int = 2
    backbone: str = "resnet18"
    log_every: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "backbone":
                continue
            low_ok = value >= 0 if f.name == "seed" else value > 0
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low_ok:
                bound = ">= 0" if f.name == "seed" else "> 0"
                raise ValueError(f"DemoConfig.{f.name} must be a number {bound}, got {value!r}")
            if f.type == "int" and not isinstance(value, int):
                raise ValueError(f"DemoConfig.{f.name} must be an int, got {value!r}")
        if self.cls_image_size < 32 or self.det_image_size < 32:
            raise ValueError(
                f"image sizes must be >= 32 (the smallest SSD input), got "
                f"cls_image_size={self.cls_image_size}, det_image_size={self.det_image_size}"
            )

    @classmethod
    def quick(cls) -> DemoConfig:
        """A tiny run (about a minute) that exercises every stage; its accuracy is low."""
        return cls(
            cls_image_size=32,
            cls_train_per_class=24,
            cls_val_per_class=4,
            cls_epochs=1,
            cls_batch_size=16,
            det_image_size=64,
            det_num_train=32,
            det_num_val=8,
            det_epochs=1,
            det_batch_size=8,
            ssd_depth=16,
            ssd_head_layers=1,
            log_every=2,
        )

    def train_config(self, log_dir: str | os.PathLike | None) -> TrainConfig:
        """The Trainer settings both stages share (logs every `log_every` steps, one
        checkpoint kept, no export: the demo writes its own model files)."""
        return TrainConfig(
            log_dir=None if log_dir is None else str(log_dir),
            log_every=self.log_every,
            burn_in_steps=5,
            keep_checkpoints=1,
            seed=self.seed,
            export=False,
        )

    def replace(self, **changes: object) -> DemoConfig:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)


def demo_precision(*, has_gpu: bool | None = None, flags: frozenset[str] | None = None) -> str:
    """The precision the demo trains in: the Trainer's "auto" (`resolve_precision`).

    A GPU gets "mixed_float16"; a CPU with bfloat16 instructions (AVX512-BF16 or AMX)
    "mixed_bfloat16"; any other CPU "float32" (bfloat16 emulated with AVX2 runs several times
    slower than float32).

    Args:
        has_gpu: whether a GPU is available (detected when None).
        flags: the CPU's feature flags (read from /proc/cpuinfo when None).
    """
    return resolve_precision("auto", has_gpu=has_gpu, flags=flags)
