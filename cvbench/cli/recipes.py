"""`cvbench recipes`: the named recipes, one line each, or one recipe knob by knob.

`cvbench recipes` lists every recipe (name, model, what it reproduces); `cvbench recipes NAME`
prints each knob of NAME with our value, the reference's value where we differ, and the
source (repository, file, line), then the deliberate differences with their reasons;
`--gpus N` adds the run at N GPUs (global batch, peak rate, steps, warmup).
"""

from __future__ import annotations

import argparse
from typing import Any

from cvbench.cli.args import positive_int

#: Training images of the standard splits, for `--gpus` (ImageNet-1k train, COCO train2017).
STANDARD_TRAIN_IMAGES = {"classification": 1_281_167, "detection": 118_287}
_VALUE_COLUMN = 24


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `recipes` to the `cvbench` command."""
    p = subparsers.add_parser(
        "recipes",
        help="list the named recipes, or print one knob by knob with its sources",
        description=(
            "Without NAME: one line per named recipe. With NAME: every knob that affects "
            "accuracy, our value, the reference's where we differ, and the source "
            "(repository, file, line), then the deliberate differences and why."
        ),
    )
    p.add_argument("name", nargs="?", default=None, metavar="NAME", help="a recipe to print")
    p.add_argument(
        "--gpus",
        type=positive_int,
        default=None,
        help="also print the run on this many GPUs (needs NAME)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Prints the list or one recipe; returns the exit code (0)."""
    from cvbench.cli.errors import CLIError
    from cvbench.tasks import recipes

    if args.name is None:
        if args.gpus is not None:
            raise CLIError("--gpus needs a recipe NAME")
        print(format_list([recipes.get_recipe(n) for n in recipes.list_recipes()]))
        return 0
    recipe = recipes.get_recipe(args.name)  # ValueError naming the known recipes
    print(format_recipe(recipe))
    if args.gpus is not None:
        images = STANDARD_TRAIN_IMAGES[recipe.task]
        run_plan = recipes.plan(recipe, num_gpus=args.gpus, train_images=images)
        print(f"\nOn {args.gpus} GPU(s), {images} training images: {run_plan.describe()}")
    return 0


def format_list(items: list[Any]) -> str:
    """One line per recipe: `name  model  summary`."""
    width = max(len(r.name) for r in items)
    model_width = max(len(r.model) for r in items)
    return "\n".join(f"{r.name:<{width}}  {r.model:<{model_width}}  {r.summary}" for r in items)


def format_value(value: Any) -> str:
    """A knob value as written in the recipe.

    Example:
        >>> format_value(3.0517578125e-05), format_value((0.75, 1.33)), format_value(None)
        ('3.0517578125e-05', '(0.75, 1.33)', 'None')
    """
    if isinstance(value, tuple):
        return "(" + ", ".join(format_value(v) for v in value) + ")"
    return str(value)


def format_recipe(recipe: Any) -> str:
    """The recipe's header, a `knob  value  source` table of every set knob (a deviating knob
    shows `ours (reference: theirs)`; a knob at its part's default without a source is the
    "cvbench default"), then the deliberate differences."""
    rows = []
    for knob, value in recipe.knobs():
        if value is None and recipe.deviation(knob) is None:
            continue
        shown = format_value(value)
        deviation = recipe.deviation(knob)
        if deviation is not None:
            shown += f" (reference: {format_value(deviation.reference)})"
        source = recipe.source_of(knob)
        rows.append((knob, shown, "cvbench default" if source is None else str(source)))
    knob_width = max(len(r[0]) for r in rows)
    # Long values (a deviation's reference) overflow their column instead of widening it.
    value_width = max([len(r[1]) for r in rows if len(r[1]) <= _VALUE_COLUMN] or [5])
    lines = [
        f"{recipe.name}: {recipe.summary}",
        f"model {recipe.model}, task {recipe.task}",
        "",
        f"{'knob':<{knob_width}}  {'value':<{value_width}}  source",
    ]
    lines += [f"{k:<{knob_width}}  {v:<{value_width}}  {src}" for k, v, src in rows]
    if recipe.deviations:
        lines += ["", "Deliberate differences:"]
        lines += [f"  {d.knob}: {d.reason}" for d in recipe.deviations]
    return "\n".join(lines)
