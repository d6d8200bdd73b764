"""Named recipes: every knob of a training recipe as data, each with its source; every model
has one, so a run always has a recipe.

- `get_recipe(name)`, `list_recipes()`, `default_recipe(model)`: the recipes by name
  (`resnet50_v1.5_90e`, `resnet50_v1.5_250e`, `inception_v3_nvcnn`, `ssd320_v1.2`, and the
  cvbench defaults `resnet18_cvbench`, `resnet34_cvbench`, `resnet101_cvbench`,
  `resnet152_cvbench`); `register_recipe` adds one (e.g. for a model of your own).
- `Recipe` and its frozen parts (`core.py`: the consumers' own `OptimizerConfig`,
  `ScheduleConfig`, `ImagePreprocessing`, and the recipe's run, loss, model, eval and
  detection knobs); the recipes themselves in `resnet50.py`, `inception_v3.py`, `ssd320.py`,
  `resnet_depths.py`.
- `resolve_recipe(model, recipe, settings=...)`: a run's recipe with the user's settings,
  each a deviation (`resolve.py`); `Recipe.with_overrides` sets knobs directly.
- `plan(recipe, num_gpus=..., train_images=...)`: the run at a global batch (`plan.py`).

Example:
    >>> from cvbench.tasks.recipes import get_recipe, plan
    >>> recipe = get_recipe("resnet50_v1.5_90e")
    >>> recipe.value("schedule.decay_from"), str(recipe.sources["loss.loss_scale"])[:27]
    ('start', 'NVIDIA/DeepLearningExamples')
    >>> plan(recipe, num_gpus=8, train_images=1281167).total_steps  # 625 steps x 90 epochs
    56250
"""

from __future__ import annotations

from cvbench.tasks.recipes.core import Deviation, OwnDefault, Recipe, Source
from cvbench.tasks.recipes.plan import RecipePlan, fit_lengths, plan, reference_learning_rate
from cvbench.tasks.recipes.registered import (
    DEFAULT_RECIPES,
    RECIPES,
    default_recipe,
    get_recipe,
    list_recipes,
    register_recipe,
)
from cvbench.tasks.recipes.resolve import SETTINGS, fit_classes, resolve_recipe

__all__ = [
    "DEFAULT_RECIPES",
    "RECIPES",
    "SETTINGS",
    "Deviation",
    "OwnDefault",
    "Recipe",
    "RecipePlan",
    "Source",
    "default_recipe",
    "fit_classes",
    "fit_lengths",
    "get_recipe",
    "list_recipes",
    "plan",
    "reference_learning_rate",
    "register_recipe",
    "resolve_recipe",
]
