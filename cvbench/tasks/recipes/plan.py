"""A recipe at a given global batch: the run's steps and rates, and the objects it gives
each consumer.

- `plan(recipe, num_gpus=..., train_images=...)` -> `RecipePlan`: global batch, peak rate,
  steps per epoch, total and warmup steps (the scaling the run banner prints);
  `fit_lengths(run)` -> the Trainer's `(epochs, steps_per_epoch)` for exactly those steps;
  `planned_schedule(recipe, run)` -> the recipe's `ScheduleConfig` with that warmup;
- `builder_arguments(recipe)` -> the model builder's keyword arguments;
- `loss_scaling(recipe)` -> the `TrainConfig` fields of the recipe's loss scaling.

The optimizer (`recipe.optimizer`), schedule (`recipe.schedule`) and preprocessing
(`recipe.preprocessing`) are the consumers' own objects already. `reference_learning_rate` is
the reference's own formula (DLE's `learning_rate.py`, the OD API's `cosine_decay_with_warmup`,
nvcnn's `polynomial_decay`), for checking a schedule against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cvbench.tasks.recipes.core import CLASSIFICATION, Recipe
from cvbench.training.config import ScheduleConfig


@dataclass(frozen=True)
class RecipePlan:
    """A recipe at one global batch.

    Attributes:
        num_gpus: ranks (GPUs) of the run.
        batch_per_gpu: images per rank and step.
        global_batch: `num_gpus * batch_per_gpu`.
        peak_lr: the rate after the warmup (scaled from the recipe's base rate).
        steps_per_epoch: `train_images // global_batch`, as DLE and nvcnn count them.
        total_steps: training steps in all.
        warmup_steps: steps of the linear warmup.
        warmup_start_lr: the rate at step 0.
        lr_rule: how `peak_lr` follows from the recipe, e.g. "0.256 x 16 / 256" (the base
            rate per reference batch, scaled linearly) or "not scaled".
        warmup_capped_from: the recipe's warmup in steps when it was longer than the run and
            `warmup_steps` is capped at half the run (`capped_warmup`); None otherwise.
    """

    num_gpus: int
    batch_per_gpu: int
    global_batch: int
    peak_lr: float
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    warmup_start_lr: float
    lr_rule: str = ""
    warmup_capped_from: int | None = None

    def describe(self, *, schedule: bool = True) -> str:
        """One line for the run's log, e.g. `global batch 2048 = 8 x 256, ...`; without
        `schedule` (a run whose optimizer and schedule are the caller's, which fix its rate
        and, with `TaskRun.fit`'s epochs, its length) only the batch and the steps per epoch:
        `global batch 16 = 1 x 16, 9 steps per epoch`."""
        batch = f"global batch {self.global_batch} = {self.num_gpus} x {self.batch_per_gpu}"
        if not schedule:
            return f"{batch}, {self.steps_per_epoch} steps per epoch"
        rule = f" ({self.lr_rule})" if self.lr_rule else ""
        return (
            f"{batch}, peak LR {self.peak_lr:g}{rule}, {self.steps_per_epoch} steps per epoch, "
            f"{self.total_steps} steps, warmup {self.warmup_steps} steps from "
            f"{self.warmup_start_lr:g}{self.warmup_note()}"
        )

    def warmup_note(self) -> str:
        """ " (capped: the recipe's N-step warmup is longer than the run)" when it was, else
        ""."""
        if self.warmup_capped_from is None:
            return ""
        return (
            f" (capped at half the run: the recipe's {self.warmup_capped_from}-step warmup is "
            "longer than the run; --warmup-epochs sets it)"
        )


def plan(
    recipe: Recipe, *, num_gpus: int, train_images: int, batch_per_gpu: int | None = None
) -> RecipePlan:
    """The steps and rates of `recipe` on `num_gpus` ranks.

    Args:
        recipe: the recipe.
        num_gpus: ranks of the run (`horovodrun -np`).
        train_images: images of the training split (1,281,167 for ImageNet).
        batch_per_gpu: images per rank and step (default: the recipe's).

    Returns:
        The plan: a recipe counted in epochs trains `int(epochs * steps_per_epoch)` steps,
        one counted in images `images // global_batch` steps; the warmup is
        `int(steps_per_epoch * warmup_epochs)` steps (DLE's and nvcnn's rule) or
        `round(warmup_fraction * total_steps)` (the SSD configurations: 12,500 / 1,000 at 8 x
        32, 100,000 / 8,000 at 1 x 32); a warmup longer than the run (a short run on small
        data) is capped at half the run (`capped_warmup`), stated in `describe()`: the
        recipe's own warmup only; one set away from the named recipe (`--warmup-epochs`) is
        refused instead (`check_explicit_warmup`).

    Raises:
        ValueError: a count below 1, a global batch larger than the training split, or a
            warmup set away from the named recipe that is longer than the run.
    """
    batch = recipe.run.batch_per_gpu if batch_per_gpu is None else batch_per_gpu
    for name, value in (("num_gpus", num_gpus), ("train_images", train_images), ("batch", batch)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"plan({recipe.name!r}): {name} must be an int >= 1, got {value!r}")
    global_batch = num_gpus * batch
    steps_per_epoch = train_images // global_batch
    if steps_per_epoch < 1:
        raise ValueError(
            f"plan({recipe.name!r}): the global batch {global_batch} is larger than the "
            f"{train_images} training images"
        )
    schedule = recipe.schedule
    if recipe.run.epochs is not None:
        total = int(steps_per_epoch * recipe.run.epochs)
    else:
        total = recipe.run.images // global_batch
    if schedule.warmup_fraction is not None:
        # a fraction of the run (also when an SSD run is given in epochs: `--epochs`)
        warmup = round(schedule.warmup_fraction * total)
    else:
        warmup = int(steps_per_epoch * schedule.warmup_epochs)
    if total < 1:
        raise ValueError(f"plan({recipe.name!r}): the run has no training step ({total})")
    peak = schedule.peak_lr(global_batch)
    if warmup > total:
        check_explicit_warmup(recipe, warmup, total, steps_per_epoch)
    capped = capped_warmup(warmup, total)
    return RecipePlan(
        num_gpus=num_gpus,
        batch_per_gpu=batch,
        global_batch=global_batch,
        peak_lr=peak,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        warmup_steps=capped,
        warmup_start_lr=schedule.warmup_start_factor * peak,
        lr_rule=lr_rule(schedule, global_batch),
        warmup_capped_from=warmup if capped != warmup else None,
    )


def check_explicit_warmup(recipe: Recipe, warmup: int, total: int, steps_per_epoch: int) -> None:
    """Refuses a warmup of `warmup` steps, longer than the run's `total`, that was set away
    from the named recipe (`--warmup-epochs`, `settings={"warmup_epochs": ...}`): an asked
    warmup is not cut to half the run without a word, as the recipe's own is
    (`capped_warmup`). The message names the setting as its deviation records it (the flag).

    Raises:
        ValueError: e.g. `--warmup-epochs 5 is longer than the run's 1 epoch (20 warmup
            steps, 4 in the run): ...`.
    """
    from cvbench.tasks.recipes.registered import get_recipe

    knob = "schedule.warmup_epochs"
    value = recipe.value(knob)
    try:
        named = get_recipe(recipe.name).value(knob)
    except (KeyError, ValueError):  # a recipe that is not registered: its own warmup
        return
    if value == named:
        return
    deviation = recipe.deviation(knob)
    reason = deviation.reason if deviation is not None else knob
    epochs = recipe.run.epochs if recipe.run.epochs is not None else total / steps_per_epoch
    raise ValueError(
        f"{reason} {value:g} is longer than the run's {epochs:g} "
        f"epoch{'' if epochs == 1 else 's'} ({warmup} warmup steps, {total} in the run): "
        f"set it to at most {total / steps_per_epoch:g}, or leave it out (the recipe's "
        "warmup is then capped at half a run it is longer than)"
    )


def capped_warmup(warmup_steps: int, total_steps: int) -> int:
    """The warmup a run of `total_steps` steps uses: the recipe's `warmup_steps`, or half the
    run (`total_steps // 2`) when the recipe's is longer than the run, where the rate would
    never reach its peak and never decay (an ImageNet recipe's 8 warmup epochs in a 5-epoch
    run on a small data set); the peak is then reached halfway and the decay has the rest.

    Example:
        >>> capped_warmup(16, 20), capped_warmup(16, 16), capped_warmup(16, 10), capped_warmup(8, 1)
        (16, 16, 5, 0)
    """
    return warmup_steps if warmup_steps <= total_steps else total_steps // 2


def lr_rule(schedule: ScheduleConfig, global_batch: int) -> str:
    """How the peak rate follows from `schedule` at `global_batch`: "0.256 x 16 / 256" (the
    base rate at the reference batch, scaled linearly) or "not scaled"."""
    if schedule.scaling == "none":
        return "not scaled"
    return f"{schedule.base_lr:g} x {global_batch} / {schedule.reference_batch}"


def fit_lengths(run: RecipePlan) -> tuple[int, int]:
    """`(epochs, steps_per_epoch)` for `Trainer.fit` so that the run trains exactly
    `run.total_steps` steps: the largest divisor of `total_steps` that is at most
    `run.steps_per_epoch` (a recipe in whole epochs: its own steps per epoch), so no epoch asks
    for more batches than the data has. SSD320 v1.2 at 8 x 32 on COCO 2017 (458 steps of
    data): 12,500 = 50 x 250.

    Example:
        >>> fit_lengths(RecipePlan(8, 32, 256, 0.16, 458, 12500, 1000, 0.0693312))
        (50, 250)
    """
    total, most = run.total_steps, run.steps_per_epoch
    if total % most == 0:
        return total // most, most
    steps = max(d for d in range(1, min(most, total) + 1) if total % d == 0)
    return total // steps, steps


def reference_learning_rate(recipe: Recipe, step: int, run: RecipePlan) -> float:
    """The rate the reference's own code gives at `step` (Python floats, no framework).

    Warmup: linear from `warmup_start_lr` to `peak_lr` over `warmup_steps` (DLE
    `learning_rate.py:59-62`, OD `learning_schedules.py:111-115`). Then the decay to
    `end_factor * peak_lr` at `total_steps`, whose progress `t` counts from step 0 over all
    steps (`decay_from="start"`: DLE `cosine_decay(lr, step, total)`, nvcnn
    `polynomial_decay`) or from the end of the warmup (`"warmup_end"`: OD
    `cos(pi (step - warmup) / (total - warmup))`): cosine `(1 + cos(pi t)) / 2`, polynomial
    `(1 - t) ** power`; 0 after `total_steps`.
    """
    schedule = recipe.schedule
    if step < run.warmup_steps:
        return run.warmup_start_lr + (run.peak_lr - run.warmup_start_lr) * step / run.warmup_steps
    if step > run.total_steps:
        return 0.0
    if schedule.decay_from == "start":
        t = step / run.total_steps
    else:
        t = (step - run.warmup_steps) / max(run.total_steps - run.warmup_steps, 1)
    if schedule.decay == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * t))
    elif schedule.decay == "polynomial":
        shape = (1.0 - t) ** schedule.power
    else:
        raise ValueError(f"recipe {recipe.name!r}: no reference formula for {schedule.decay!r}")
    end = schedule.end_factor * run.peak_lr
    return end + (run.peak_lr - end) * shape


def planned_schedule(recipe: Recipe, run: RecipePlan) -> ScheduleConfig:
    """The recipe's schedule with the plan's warmup in steps (`ScheduleConfig.warmup_steps`),
    as the Trainer builds it for the run."""
    return recipe.schedule.replace(warmup_steps=run.warmup_steps)


def builder_arguments(recipe: Recipe, *, starting_weights: bool = True) -> dict[str, Any]:
    """Keyword arguments of the model builder: `get_model(recipe.model, **...)` (the input
    shape apart: `(image_size, image_size, 3)` for classifiers).

    Args:
        recipe: the recipe.
        starting_weights: False for a model whose every weight a checkpoint then restores
            (evaluation, a resume): it is built without its starting weights (no file read,
            nothing downloaded), its architecture fixed by the knobs (`model.variant`); an
            SSD without its backbone's weights.
    """
    if recipe.task == CLASSIFICATION:
        m = recipe.model_knobs
        kwargs = {
            "num_classes": m.num_classes,
            "bn_momentum": m.bn_momentum,
            "bn_epsilon": m.bn_epsilon,
            "bn_scale": m.bn_scale,
            "conv_initializer": m.conv_initializer,
            "dense_initializer": m.dense_initializer,
            "weights": m.weights if starting_weights else None,
        }
        if m.last_block_pooling is not None:
            kwargs["last_block_pooling"] = m.last_block_pooling
        if m.variant is not None:
            kwargs["variant"] = m.variant
        return kwargs
    d = recipe.detection
    return {
        "num_classes": d.num_classes,
        "backbone": d.backbone,
        "image_size": d.image_size,
        "freeze_batchnorm": d.freeze_batchnorm,
        "backbone_weights": d.backbone_weights if starting_weights else None,
        "weight_decay": d.l2_weight,
    }


def loss_scaling(recipe: Recipe) -> dict[str, Any]:
    """The `TrainConfig` fields of the recipe's loss scaling: `dynamic_loss_scale`, and the
    static (or initial) `loss_scale` where the recipe sets one (else TrainConfig's)."""
    fields: dict[str, Any] = {"dynamic_loss_scale": recipe.loss.dynamic_loss_scale}
    if recipe.loss.loss_scale is not None:
        fields["loss_scale"] = recipe.loss.loss_scale
    return fields


def image_size(recipe: Recipe) -> int:
    """The recipe's input size (`model.image_size` or `detection.image_size`)."""
    part = recipe.model_knobs if recipe.task == CLASSIFICATION else recipe.detection
    return part.image_size


def num_classes(recipe: Recipe) -> int:
    """The recipe's classes (`model.num_classes` or `detection.num_classes`)."""
    part = recipe.model_knobs if recipe.task == CLASSIFICATION else recipe.detection
    return part.num_classes
