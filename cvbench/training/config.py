"""Run configuration of the Trainer: frozen dataclasses, validated on construction.

Three pieces, each passed explicitly (there is no global configuration):

- `OptimizerConfig`: which update rule (SGD with momentum or LARS/LARC) and its settings.
- `ScheduleConfig`: the learning-rate schedule, with the base rate given per 256 images.
- `TrainConfig`: everything about the run itself: precision, checkpoints, logs, seeds.

NVIDIA's ResNet-50 v1.5 recipe (8 GPUs x 256, AMP) in these terms::

    OptimizerConfig(name="sgd", momentum=0.875, weight_decay=3.0517578125e-05)
    ScheduleConfig(base_lr=0.256, warmup_epochs=8, decay="cosine")
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

PRECISIONS = ("mixed_float16", "mixed_bfloat16", "float32")
PRECISION_ALIASES = {
    "fp16": "mixed_float16",
    "bf16": "mixed_bfloat16",
    "fp32": "float32",
    "mixed_float16": "mixed_float16",
    "mixed_bfloat16": "mixed_bfloat16",
    "float32": "float32",
    "auto": "auto",
}
OPTIMIZERS = ("sgd", "lars")
LARC_MODES = ("clip", "scale")
DECAYS = ("cosine", "polynomial", "step", "constant")
DECAY_FROM = ("warmup_end", "start")
SCALINGS = ("linear", "none")
COMPRESSIONS = ("none", "fp16")


def _check_non_negative(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{owner}.{name} must be a finite number >= 0, got {value!r}")


def _check_choice(owner: str, name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{owner}.{name} must be one of {choices}, got {value!r}")


@dataclass(frozen=True)
class OptimizerConfig:
    """Settings of the update rule.

    Attributes:
        name: "sgd" (momentum SGD) or "lars" (SGD with LARC layer-wise rate adaptation).
        momentum: momentum coefficient in [0, 1).
        nesterov: use Nesterov momentum.
        weight_decay: L2 coefficient added to the gradient (`g + wd * w`) before momentum,
            as NVIDIA's TensorFlow scripts do by adding `wd * sum(w^2) / 2` to the loss.
        decay_batchnorm: also decay the scale and offset of normalization layers.
        decay_bias: also decay biases.
        larc_eta: LARC trust coefficient (local rate `eta * ||w|| / ||g||`).
        larc_mode: "clip" (`min(local / lr, 1)` scales the gradient) or "scale" (the local rate
            itself scales the gradient).
        larc_epsilon: local rate used when `||w||` or `||g||` is zero.
    """

    name: str = "sgd"
    momentum: float = 0.875
    nesterov: bool = False
    weight_decay: float = 3.0517578125e-05
    decay_batchnorm: bool = False
    decay_bias: bool = False
    larc_eta: float = 0.003
    larc_mode: str = "clip"
    larc_epsilon: float = 1.0

    def __post_init__(self) -> None:
        _check_choice("OptimizerConfig", "name", self.name, OPTIMIZERS)
        _check_choice("OptimizerConfig", "larc_mode", self.larc_mode, LARC_MODES)
        _check_non_negative(
            "OptimizerConfig",
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            larc_eta=self.larc_eta,
            larc_epsilon=self.larc_epsilon,
        )
        if self.momentum >= 1:
            raise ValueError(f"OptimizerConfig.momentum must be < 1, got {self.momentum!r}")
        if self.nesterov and self.momentum == 0:
            raise ValueError("OptimizerConfig.nesterov=True needs momentum > 0, got momentum=0")

    def replace(self, **changes: object) -> OptimizerConfig:
        """Returns a copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ScheduleConfig:
    """A learning-rate schedule: linear warmup, then a decay to the end of training.

    The peak rate is `base_lr * global_batch / reference_batch` (`scaling="linear"`) or
    `base_lr` (`scaling="none"`); the warmup rises linearly from `warmup_start_factor * peak`
    at step 0 to `peak` at the end of the warmup.

    `decay_from` says where the cosine/polynomial decay starts counting: "warmup_end" (the
    decay spans the steps after the warmup and starts at the peak) or "start" (NVIDIA
    DeepLearningExamples' `utils/learning_rate.py`: the decay spans all steps from step 0 and
    the warmup replaces its first steps, so the rate drops from just under the peak to the
    decayed value `cos(pi * warmup / total)` when the warmup ends; mid-run it is half the peak).

    Attributes:
        base_lr: rate for a global batch of `reference_batch` images.
        reference_batch: the batch `base_lr` refers to (256, as in NVIDIA's recipes).
        scaling: "linear" (the rate scales with the global batch) or "none" (`base_lr` at
            any batch, as nvcnn's `--learning_rate`).
        warmup_epochs: warmup length in epochs (fractions allowed); see `warmup_steps`.
        warmup_fraction: warmup length as a fraction of the run's steps (SSD320's
            configurations: 1,000 of 12,500), instead of `warmup_epochs` (which must then
            be 0).
        warmup_steps: warmup length in steps; overrides `warmup_epochs` and
            `warmup_fraction` when set.
        warmup_start_factor: rate at step 0 as a fraction of the peak (SSD320: 0.43332).
        decay: "cosine", "polynomial" (`(1 - t) ** power`), "step" (multiply by
            `decay_rate` at each boundary) or "constant".
        power: exponent of the polynomial decay.
        end_factor: final rate of cosine/polynomial decay, as a fraction of the peak.
        decay_from: "warmup_end" or "start" (see above).
        boundaries_epochs: step-decay boundaries in epochs, increasing.
        decay_rate: factor applied at each step-decay boundary.
    """

    base_lr: float = 0.256
    reference_batch: int = 256
    scaling: str = "linear"
    warmup_epochs: float = 0.0
    warmup_fraction: float | None = None
    warmup_steps: int | None = None
    warmup_start_factor: float = 0.0
    decay: str = "cosine"
    power: float = 2.0
    end_factor: float = 0.0
    decay_from: str = "warmup_end"
    boundaries_epochs: tuple[float, ...] = ()
    decay_rate: float = 0.1

    def __post_init__(self) -> None:
        _check_choice("ScheduleConfig", "decay", self.decay, DECAYS)
        _check_choice("ScheduleConfig", "decay_from", self.decay_from, DECAY_FROM)
        _check_choice("ScheduleConfig", "scaling", self.scaling, SCALINGS)
        if self.warmup_fraction is not None:
            _check_non_negative("ScheduleConfig", warmup_fraction=self.warmup_fraction)
            if self.warmup_fraction > 1 or self.warmup_epochs:
                raise ValueError(
                    "ScheduleConfig.warmup_fraction must be in [0, 1] with warmup_epochs=0, "
                    f"got warmup_fraction={self.warmup_fraction!r}, "
                    f"warmup_epochs={self.warmup_epochs!r}"
                )
        _check_non_negative(
            "ScheduleConfig",
            base_lr=self.base_lr,
            warmup_epochs=self.warmup_epochs,
            warmup_start_factor=self.warmup_start_factor,
            power=self.power,
            end_factor=self.end_factor,
            decay_rate=self.decay_rate,
        )
        if not isinstance(self.reference_batch, int) or self.reference_batch <= 0:
            raise ValueError(
                f"ScheduleConfig.reference_batch must be a positive int, "
                f"got {self.reference_batch!r}"
            )
        if self.warmup_steps is not None and (
            not isinstance(self.warmup_steps, int) or self.warmup_steps < 0
        ):
            raise ValueError(
                f"ScheduleConfig.warmup_steps must be an int >= 0, got {self.warmup_steps!r}"
            )
        bounds = tuple(self.boundaries_epochs)
        increasing = all(b1 < b2 for b1, b2 in zip(bounds, bounds[1:], strict=False))
        if not increasing or not all(0 < b < math.inf for b in bounds):  # NaN: neither
            raise ValueError(
                "ScheduleConfig.boundaries_epochs must be positive, finite and increasing, "
                f"got {bounds!r}"
            )
        if self.decay == "step" and not bounds:
            raise ValueError("ScheduleConfig.decay='step' needs boundaries_epochs, got ()")

    def replace(self, **changes: object) -> ScheduleConfig:
        """Returns a copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def peak_lr(self, global_batch: int) -> float:
        """The rate after the warmup at `global_batch` images per step (see `scaling`)."""
        if self.scaling == "none":
            return self.base_lr
        return self.base_lr * global_batch / self.reference_batch

    def warmup_length(self, *, steps_per_epoch: int, total_steps: int) -> int:
        """The warmup in steps: `warmup_steps`, else `round(warmup_fraction * total_steps)`,
        else `round(warmup_epochs * steps_per_epoch)`."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        if self.warmup_fraction is not None:
            return round(self.warmup_fraction * total_steps)
        return int(round(self.warmup_epochs * steps_per_epoch))


# The largest `TrainConfig.seed`: NumPy's global seed is a 32-bit unsigned int (Python's
# `random`, TensorFlow and JAX take it too).
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (everything but the model, data and update rule).

    Attributes:
        log_dir: where rank 0 writes checkpoints, the JSON-lines log, TensorBoard events and
            the exported model; None writes nothing ("" is refused: "." names the current
            folder).
        checkpoint_every: also checkpoint every this many steps (0: only at epoch ends).
        keep_checkpoints: how many of the newest checkpoints to keep.
        resume: continue from the newest valid checkpoint in `log_dir/checkpoints`; one
            written for another plan (epochs, steps per epoch, global batch, precision, model)
            is refused with a message saying what differs.
        force_resume: resume from such a checkpoint anyway, with a warning naming the
            differences (needs `resume`).
        log_every: print a `step epoch img/s loss lr` line every this many steps (0: never).
        burn_in_steps: steps left out of the final `Images/sec` summary.
        progress_bar: show a progress bar on rank 0 ("auto": on a terminal or in a Jupyter kernel).
        seed: seeds Python, NumPy and the backend before the model is built: None or an
            int from 0 to `MAX_SEED` (2**32 - 1, NumPy's range).
        deterministic: also make the backend's ops deterministic (bit-exact reruns and
            resumes): TensorFlow's op determinism; on JAX GPUs XLA's deterministic kernels,
            whose flag must be set before JAX starts (`cvbench.training.determinism`).
        jit_compile: XLA-compile the train step: "auto" lets Keras decide (off under Horovod,
            whose operations have no XLA kernels in this build).
        compression: "fp16" compresses gradients for the allreduce; only with
            mixed_float16, where loss scaling skips the steps whose gradients it overflows
            (and a dynamic scale halves).
        dynamic_loss_scale: mixed_float16 loss scaling: True, dynamic (starts at `loss_scale`,
            halves on a non-finite step, doubles after `loss_scale_growth_steps` finite ones);
            False, static at `loss_scale` (NVIDIA's ResNet-50 scripts: 128). Either way a step
            with non-finite gradients is skipped.
        loss_scale: initial dynamic loss scale, or the static one (mixed_float16).
        loss_scale_growth_steps: finite steps before a dynamic loss scale doubles.
        export: write `model.keras` (and a SavedModel on TensorFlow) at the end of `fit`.
    """

    log_dir: str | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    resume: bool = False
    force_resume: bool = False
    log_every: int = 100
    burn_in_steps: int = 20
    progress_bar: bool | str = "auto"
    seed: int | None = None
    deterministic: bool = False
    jit_compile: bool | str = "auto"
    compression: str = "none"
    dynamic_loss_scale: bool = True
    loss_scale: float = 2.0**15
    loss_scale_growth_steps: int = 2000
    export: bool = True

    def __post_init__(self) -> None:
        for name in ("checkpoint_every", "log_every", "burn_in_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"TrainConfig.{name} must be an int >= 0, got {value!r}")
        for name in ("keep_checkpoints", "loss_scale_growth_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be an int >= 1, got {value!r}")
        _check_choice("TrainConfig", "compression", self.compression, COMPRESSIONS)
        if self.progress_bar not in (True, False, "auto"):
            raise ValueError(
                f"TrainConfig.progress_bar must be True, False or 'auto', got {self.progress_bar!r}"
            )
        if self.jit_compile not in (True, False, "auto"):
            raise ValueError(
                f"TrainConfig.jit_compile must be True, False or 'auto', got {self.jit_compile!r}"
            )
        if not isinstance(self.dynamic_loss_scale, bool):
            raise ValueError(
                f"TrainConfig.dynamic_loss_scale must be True or False, "
                f"got {self.dynamic_loss_scale!r}"
            )
        if not (isinstance(self.loss_scale, (int, float)) and self.loss_scale > 0):
            raise ValueError(f"TrainConfig.loss_scale must be > 0, got {self.loss_scale!r}")
        if isinstance(self.log_dir, str) and not self.log_dir.strip():
            raise ValueError(
                f"TrainConfig.log_dir is empty ({self.log_dir!r}): name a folder "
                "('.' for the current one) or None for no logs"
            )
        seed = self.seed
        whole = isinstance(seed, numbers.Integral) and not isinstance(seed, bool)
        if seed is not None and not (whole and 0 <= seed <= MAX_SEED):
            raise ValueError(
                f"TrainConfig.seed must be None or an int from 0 to {MAX_SEED} (NumPy's "
                f"seed range), got {seed!r}"
            )
        if self.resume and self.log_dir is None:
            raise ValueError("TrainConfig.resume=True needs a log_dir to find checkpoints in")
        if self.force_resume and not self.resume:
            raise ValueError("TrainConfig.force_resume=True needs resume=True")

    def replace(self, **changes: object) -> TrainConfig:
        """Returns a copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)


def canonical_precision(precision: str) -> str:
    """Maps "fp16"/"bf16"/"fp32"/"auto" and the Keras policy names to one spelling.

    Raises:
        ValueError: naming the unknown value.
    """
    try:
        return PRECISION_ALIASES[precision]
    except (KeyError, TypeError):
        known = ", ".join(sorted(PRECISION_ALIASES))
        raise ValueError(f"unknown precision {precision!r}; known: {known}") from None
