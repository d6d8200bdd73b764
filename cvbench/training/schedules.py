"""Learning-rate schedules: linear warmup, then cosine, polynomial, step or constant.

`WarmupSchedule` is a `keras.optimizers.schedules.LearningRateSchedule` written with
`keras.ops`, so it runs on every backend and inside compiled train steps. Steps count from 0:
the optimizer evaluates the schedule at its `iterations` before incrementing it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import keras
from keras import ops

from cvbench.training.config import DECAY_FROM, DECAYS, ScheduleConfig


@keras.saving.register_keras_serializable(package="cvbench")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to `peak_lr`, then a decay until `total_steps`.

    - step < warmup_steps: `peak * (start + (1 - start) * step / warmup_steps)`.
    - afterwards, with `t = (step - warmup_steps) / (total_steps - warmup_steps)`
      (`decay_from="warmup_end"`) or `t = step / total_steps` (`decay_from="start"`, NVIDIA
      DeepLearningExamples' ConvNets `utils/learning_rate.py`), clipped to [0, 1], and
      `end = end_factor * peak`:
      cosine `end + (peak - end) * (1 + cos(pi t)) / 2`;
      polynomial `end + (peak - end) * (1 - t) ** power`;
      step `peak * decay_rate ** (number of boundaries <= step)`;
      constant `peak`.

    Example:
        >>> s = WarmupSchedule(1.0, warmup_steps=10, total_steps=110, decay="cosine")
        >>> round(float(s(5)), 6), round(float(s(60)), 6)
        (0.5, 0.5)

    Args:
        peak_lr: the rate at the end of the warmup.
        warmup_steps: steps of linear warmup (0: none).
        total_steps: the step at which cosine/polynomial decay reach `end_factor * peak`.
        decay: one of "cosine", "polynomial", "step", "constant".
        warmup_start_factor: rate at step 0 as a fraction of the peak.
        power: polynomial exponent.
        end_factor: final rate as a fraction of the peak (cosine/polynomial).
        decay_from: "warmup_end" (the decay spans the steps after the warmup) or "start"
            (it spans all `total_steps` and the warmup covers its first steps).
        boundaries: step-decay boundaries in steps, increasing.
        decay_rate: factor applied at each boundary.
    """

    def __init__(
        self,
        peak_lr: float,
        *,
        warmup_steps: int = 0,
        total_steps: int = 1,
        decay: str = "cosine",
        warmup_start_factor: float = 0.0,
        power: float = 2.0,
        end_factor: float = 0.0,
        decay_from: str = "warmup_end",
        boundaries: Sequence[int] = (),
        decay_rate: float = 0.1,
    ) -> None:
        if decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}")
        if decay_from not in DECAY_FROM:
            raise ValueError(f"decay_from must be one of {DECAY_FROM}, got {decay_from!r}")
        if warmup_steps < 0 or total_steps < 1:
            raise ValueError(
                f"need warmup_steps >= 0 and total_steps >= 1, got warmup_steps={warmup_steps!r}"
                f", total_steps={total_steps!r}"
            )
        if peak_lr < 0:
            raise ValueError(f"peak_lr must be >= 0, got {peak_lr!r}")
        boundaries = [int(b) for b in boundaries]
        if any(b2 <= b1 for b1, b2 in zip(boundaries, boundaries[1:], strict=False)):
            raise ValueError(f"boundaries must be increasing, got {boundaries!r}")
        if decay == "step" and not boundaries:
            raise ValueError("decay='step' needs boundaries, got []")
        self.peak_lr = float(peak_lr)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.decay = decay
        self.warmup_start_factor = float(warmup_start_factor)
        self.power = float(power)
        self.end_factor = float(end_factor)
        self.decay_from = decay_from
        self.boundaries = boundaries
        self.decay_rate = float(decay_rate)

    def _decayed(self, step):
        peak = self.peak_lr
        end = self.end_factor * peak
        first = 0 if self.decay_from == "start" else self.warmup_steps
        span = max(self.total_steps - first, 1)
        t = ops.clip((step - float(first)) / float(span), 0.0, 1.0)
        if self.decay == "cosine":
            return end + (peak - end) * 0.5 * (1.0 + ops.cos(math.pi * t))
        if self.decay == "polynomial":
            return end + (peak - end) * ops.power(1.0 - t, self.power)
        if self.decay == "step":
            passed = ops.zeros_like(step)
            for boundary in self.boundaries:
                passed = passed + ops.cast(step >= float(boundary), "float32")
            return peak * ops.power(self.decay_rate, passed)
        return peak * ops.ones_like(step)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        decayed = self._decayed(step)
        if self.warmup_steps == 0:
            return decayed
        start = self.warmup_start_factor
        fraction = step / float(self.warmup_steps)
        warm = self.peak_lr * (start + (1.0 - start) * fraction)
        return ops.where(step < float(self.warmup_steps), warm, decayed)

    def get_config(self) -> dict:
        return {
            "peak_lr": self.peak_lr,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
            "warmup_start_factor": self.warmup_start_factor,
            "power": self.power,
            "end_factor": self.end_factor,
            "decay_from": self.decay_from,
            "boundaries": list(self.boundaries),
            "decay_rate": self.decay_rate,
        }


def build_schedule(
    config: ScheduleConfig, *, global_batch: int, steps_per_epoch: int, epochs: int
) -> WarmupSchedule:
    """Turns a `ScheduleConfig` into a schedule for one run.

    Args:
        config: the schedule settings.
        global_batch: images per step over all ranks; the peak rate is
            `config.peak_lr(global_batch)`.
        steps_per_epoch: steps in one epoch (converts epochs to steps).
        epochs: length of the run; decay ends at `epochs * steps_per_epoch`.

    A warmup as long as the run or longer is allowed (short benchmark runs): the rate then
    only rises.

    Raises:
        ValueError: if a size is not positive.
    """
    for name, value in (
        ("global_batch", global_batch),
        ("steps_per_epoch", steps_per_epoch),
        ("epochs", epochs),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    total = epochs * steps_per_epoch
    warmup = config.warmup_length(steps_per_epoch=steps_per_epoch, total_steps=total)
    boundaries = [int(round(b * steps_per_epoch)) for b in config.boundaries_epochs]
    return WarmupSchedule(
        config.peak_lr(global_batch),
        warmup_steps=warmup,
        total_steps=total,
        decay=config.decay,
        warmup_start_factor=config.warmup_start_factor,
        power=config.power,
        end_factor=config.end_factor,
        decay_from=config.decay_from,
        boundaries=boundaries,
        decay_rate=config.decay_rate,
    )
