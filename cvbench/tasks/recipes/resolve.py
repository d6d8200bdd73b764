"""The recipe of a run: a named recipe (or the model's default) with the settings a user
chose, each set on its knob by `Recipe.with_overrides` and recorded as a deviation.

The settings are the names the Python API and the CLI share (`lr`, `batch_size`, ...; the
CLI's flags are these names with dashes). `resolve_recipe` is the one place a run's settings
are decided: `TaskOptions` calls it, so `cvbench train`, `cvbench eval`, `cvbench benchmark`
and `prepare_run` resolve a model the same way. `fit_classes` then gives the recipe the
classes the task's data has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cvbench.tasks.recipes.core import DETECTION, Recipe
from cvbench.tasks.recipes.registered import default_recipe, get_recipe
from cvbench.utils.model_file import MAX_INPUT_SIDE

#: The largest `image_size` a run may set: predict's bound on a model file's input side
#: (`--max-input-side`), 8192.
MAX_IMAGE_SIZE = MAX_INPUT_SIDE

#: A setting -> the knob it sets in a classification recipe and in a detection recipe (None
#: where that kind of recipe has no such knob).
SETTINGS: dict[str, tuple[str | None, str | None]] = {
    "batch_size": ("run.batch_per_gpu", "run.batch_per_gpu"),
    "epochs": ("run.epochs", "run.epochs"),
    "precision": ("run.precision", "run.precision"),
    "lr": ("schedule.base_lr", "schedule.base_lr"),
    "warmup_epochs": ("schedule.warmup_epochs", "schedule.warmup_epochs"),
    "schedule": ("schedule.decay", "schedule.decay"),
    "power": ("schedule.power", "schedule.power"),
    "decay_from": ("schedule.decay_from", "schedule.decay_from"),
    "boundaries": ("schedule.boundaries_epochs", "schedule.boundaries_epochs"),
    "optimizer": ("optimizer.name", "optimizer.name"),
    "momentum": ("optimizer.momentum", "optimizer.momentum"),
    "nesterov": ("optimizer.nesterov", "optimizer.nesterov"),
    "weight_decay": ("optimizer.weight_decay", "detection.l2_weight"),
    "label_smoothing": ("loss.label_smoothing", "loss.label_smoothing"),
    "mixup": ("loss.mixup_alpha", None),
    "crop_area_range": ("preprocessing.area_range", "detection.crop_area_range"),
    "loss_scale": ("loss.loss_scale", "loss.loss_scale"),
    "dynamic_loss_scale": ("loss.dynamic_loss_scale", "loss.dynamic_loss_scale"),
    "image_size": ("model.image_size", "detection.image_size"),
    "num_classes": ("model.num_classes", "detection.num_classes"),
    "weights": ("model.weights", None),
    "backbone_weights": (None, "detection.backbone_weights"),
}


def setting_knob(recipe: Recipe, setting: str) -> str | None:
    """The knob `setting` sets in `recipe` (None: this kind of recipe has none).

    Raises:
        ValueError: naming an unknown setting and listing the known ones.
    """
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; settings: {', '.join(SETTINGS)}")
    classification, detection = SETTINGS[setting]
    return detection if recipe.task == DETECTION else classification


def resolve_recipe(
    model: str | None = None,
    recipe: Recipe | str | None = None,
    *,
    settings: Mapping[str, Any] | None = None,
    reasons: Mapping[str, str] | None = None,
) -> Recipe:
    """The recipe of a run of `model`.

    Args:
        model: the model to train (None: `recipe`'s).
        recipe: a `Recipe` or its name; None: the model's default (`default_recipe`).
        settings: setting -> value (`SETTINGS`); None values are not set, nor is the
            precision "auto". A detection recipe's `backbone_weights` is always the one given
            (None without), so that nothing downloads unasked.
        reasons: setting -> the reason its deviation records (the CLI: the flag, e.g.
            "--lr"); default: the setting's name.

    Raises:
        ValueError: neither a model nor a recipe; an unknown recipe or setting; a recipe for
            another model; a setting the recipe has no knob for (naming its reason, e.g. the
            flag); a value the knob's part refuses.
    """
    if isinstance(recipe, str):
        recipe = get_recipe(recipe)
    if recipe is None:
        if model is None:
            raise ValueError("a model or a recipe is needed")
        recipe = default_recipe(model)
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe must be a Recipe or a name, got {recipe!r}")
    if model is not None and recipe.model != model:
        raise ValueError(f"recipe {recipe.name!r} trains {recipe.model}, not {model}")
    settings, reasons = dict(settings or {}), dict(reasons or {})
    if recipe.task == DETECTION:
        settings.setdefault("backbone_weights", None)
    changes: dict[str, Any] = {}
    why: dict[str, str] = {}  # knob -> the reason its deviation records
    for name, value in settings.items():
        reason = reasons.get(name, name)
        if name == "precision" and value == "auto":
            continue  # auto: the recipe's AMP on a GPU
        if value is None and not (name == "backbone_weights" and recipe.task == DETECTION):
            continue
        knob = setting_knob(recipe, name)
        if knob is None:
            raise ValueError(f"{reason} sets no knob of recipe {recipe.name}")
        if name == "image_size":
            check_image_size(value, reason=reason)
        if name == "batch_size":
            check_batch_size(value, reason=reason)
        if value is None:
            reason = f"no {reason}"
        changed = {knob: value}
        if name == "epochs" and recipe.run.images is not None:
            changed["run.images"] = None  # counted in epochs now
        if name == "num_classes":
            changed.update(_smoothing_for(recipe, value))
        changes.update(changed)
        why.update(dict.fromkeys(changed, reason))
    # every knob set at once: each part is validated with all its new values (`--schedule
    # step` with its `--boundaries`), each deviation recording its own setting's reason
    return recipe.with_overrides(changes, reason=why) if changes else recipe


def check_image_size(value: Any, *, reason: str = "image_size") -> None:
    """Refuses an image side over `MAX_IMAGE_SIZE` (one batch of such images would not fit
    in memory), naming `reason` (the CLI: its flag) and the bound.

    Example:
        >>> check_image_size(8193, reason="--image-size")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: --image-size 8193 is over 8192, the largest image side cvbench trains or...
    """
    if isinstance(value, int) and value > MAX_IMAGE_SIZE:
        raise ValueError(
            f"{reason} {value} is over {MAX_IMAGE_SIZE}, the largest image side cvbench "
            "trains or evaluates at"
        )


def check_batch_size(value: Any, *, reason: str = "batch_size") -> None:
    """Refuses a batch size (images per rank and step: the knob `run.batch_per_gpu`) that is
    not a positive int, naming `reason` (the setting, or the CLI's flag).

    Example:
        >>> check_batch_size(0)
        Traceback (most recent call last):
        ...
        ValueError: batch_size must be a positive int (images per rank and step), got 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{reason} must be a positive int (images per rank and step), got {value!r}"
        )


def fit_classes(recipe: Recipe, num_classes: int, *, reason: str) -> Recipe:
    """`recipe` predicting `num_classes` classes (the task's data's), unchanged when it
    already does; label smoothing then spreads over the model's own classes."""
    knob = setting_knob(recipe, "num_classes")
    if recipe.value(knob) == num_classes:
        return recipe
    return recipe.with_overrides(
        {knob: num_classes, **_smoothing_for(recipe, num_classes)}, reason=reason
    )


def _smoothing_for(recipe: Recipe, num_classes: int) -> dict[str, Any]:
    """A classification recipe that smooths over a fixed class count (DLE's 1001) smooths
    over the model's own classes once they change."""
    if recipe.task == DETECTION or recipe.loss.smoothing_classes is None:
        return {}
    if recipe.value("model.num_classes") == num_classes:
        return {}
    return {"loss.smoothing_classes": None}
