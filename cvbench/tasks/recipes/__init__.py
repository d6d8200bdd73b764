"""Named recipes: every knob of a published training recipe as data, each with its source.

- `get_recipe(name)`, `list_recipes()`, `default_recipe(model)`: the recipes by name
  (`resnet50_v1.5_90e`, `resnet50_v1.5_250e`, `inception_v3_nvcnn`, `ssd320_v1.2`).
- `Recipe` and its frozen parts (`core.py`); the recipes themselves in `resnet50.py`,
  `inception_v3.py`, `ssd320.py`.
- `plan(recipe, num_gpus=..., train_images=...)` and the per-consumer conversions
  (`consumers.py`).

Example:
    >>> from cvbench.tasks.recipes import get_recipe, plan
    >>> recipe = get_recipe("resnet50_v1.5_90e")
    >>> recipe.value("schedule.decay_from"), str(recipe.sources["loss.loss_scale"])[:27]
    ('start', 'NVIDIA/DeepLearningExamples')
    >>> plan(recipe, num_gpus=8, train_images=1281167).total_steps  # 625 steps x 90 epochs
    56250
"""

from __future__ import annotations

from cvbench.registry import Registry
from cvbench.tasks.recipes.consumers import (
    RecipePlan,
    fit_lengths,
    loss_kwargs,
    mixup_kwargs,
    model_kwargs,
    optimizer_config,
    peak_learning_rate,
    plan,
    preprocessing_kwargs,
    reference_learning_rate,
    schedule_kwargs,
    train_config_kwargs,
)
from cvbench.tasks.recipes.core import Deviation, Recipe, Source
from cvbench.tasks.recipes.inception_v3 import INCEPTION_V3_NVCNN
from cvbench.tasks.recipes.resnet50 import RESNET50_V15_90E, RESNET50_V15_250E
from cvbench.tasks.recipes.ssd320 import SSD320_V12

RECIPES: Registry[Recipe] = Registry("recipe")


def _register(recipe: Recipe) -> None:
    RECIPES.register(recipe.name, lambda: recipe, task=recipe.task)


for _recipe in (RESNET50_V15_90E, RESNET50_V15_250E, INCEPTION_V3_NVCNN, SSD320_V12):
    _register(_recipe)

#: The reference recipe of each model that has one (`cvbench train` without `--recipe`).
DEFAULT_RECIPES = {
    "resnet50": RESNET50_V15_90E.name,
    "inception_v3": INCEPTION_V3_NVCNN.name,
    "ssd320": SSD320_V12.name,
}


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`.

    Raises:
        ValueError: naming it and listing every recipe.
    """
    return RECIPES.build(name)


def list_recipes() -> list[str]:
    """The recipes' names, sorted (as `cvbench recipes` lists them)."""
    return list(RECIPES)


def default_recipe(model: str) -> Recipe | None:
    """The reference recipe of `model` (`resnet50` -> `resnet50_v1.5_90e`), or None for a
    model without one (its task's defaults apply)."""
    name = DEFAULT_RECIPES.get(model)
    return None if name is None else get_recipe(name)


__all__ = [
    "DEFAULT_RECIPES",
    "RECIPES",
    "Deviation",
    "Recipe",
    "RecipePlan",
    "Source",
    "default_recipe",
    "fit_lengths",
    "get_recipe",
    "list_recipes",
    "loss_kwargs",
    "mixup_kwargs",
    "model_kwargs",
    "optimizer_config",
    "peak_learning_rate",
    "plan",
    "preprocessing_kwargs",
    "reference_learning_rate",
    "schedule_kwargs",
    "train_config_kwargs",
]
