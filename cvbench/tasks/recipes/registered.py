"""The registry of recipes: every model's default recipe and the other named ones.

`register_recipe` adds one; `get_recipe`, `list_recipes` and `default_recipe` read them. The
built-in recipes register on import: NVIDIA's (`resnet50_v1.5_90e`, `resnet50_v1.5_250e`,
`inception_v3_nvcnn`, `ssd320_v1.2`) and cvbench's defaults for the other ResNet depths.
"""

from __future__ import annotations

from cvbench.registry import Registry
from cvbench.tasks.recipes.core import Recipe
from cvbench.tasks.recipes.inception_v3 import INCEPTION_V3_NVCNN
from cvbench.tasks.recipes.resnet50 import RESNET50_V15_90E, RESNET50_V15_250E
from cvbench.tasks.recipes.resnet_depths import DEPTH_RECIPES
from cvbench.tasks.recipes.ssd320 import SSD320_V12

RECIPES: Registry[Recipe] = Registry("recipe")
#: The default recipe of each model (`cvbench train --model M` without `--recipe`).
DEFAULT_RECIPES: dict[str, str] = {}


def register_recipe(recipe: Recipe, *, default: bool = False) -> None:
    """Registers `recipe` under its name; with `default`, as its model's default recipe.

    Raises:
        ValueError: for a name already registered, or a second default for a model.
    """
    if default and recipe.model in DEFAULT_RECIPES:
        raise ValueError(
            f"{recipe.model} already has a default recipe, {DEFAULT_RECIPES[recipe.model]!r}"
        )
    RECIPES.register(recipe.name, lambda: recipe, task=recipe.task)
    if default:
        DEFAULT_RECIPES[recipe.model] = recipe.name


for _recipe in (RESNET50_V15_90E, INCEPTION_V3_NVCNN, SSD320_V12, *DEPTH_RECIPES):
    register_recipe(_recipe, default=True)
register_recipe(RESNET50_V15_250E)


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`.

    Raises:
        ValueError: naming it and listing every recipe.
    """
    return RECIPES.build(name)


def list_recipes() -> list[str]:
    """The recipes' names, sorted (as `cvbench recipes` lists them)."""
    return list(RECIPES)


def default_recipe(model: str) -> Recipe:
    """The default recipe of `model` (`resnet50` -> `resnet50_v1.5_90e`).

    Raises:
        ValueError: for an unknown model (listing the known ones); for a model without one
            (e.g. registered with `cvbench.zoo.register` and no
            `register_recipe(..., default=True)`), saying how to give it one.
    """
    name = DEFAULT_RECIPES.get(model)
    if name is None:
        from cvbench.zoo import task_of

        task_of(model)  # an unknown model: ValueError naming it and listing the known ones
        known = ", ".join(sorted(DEFAULT_RECIPES))
        raise ValueError(
            f"model {model!r} has no recipe (models with one: {known}); register one with "
            "cvbench.tasks.recipes.register_recipe(recipe, default=True), e.g. "
            f"get_recipe('resnet18_cvbench').for_model(name=..., model={model!r}, ...)"
        )
    return get_recipe(name)
