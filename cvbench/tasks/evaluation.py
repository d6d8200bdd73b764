"""Evaluating a saved model with a task: a checkpoint, a run folder's newest checkpoint, or
a `.keras` model file, scored over the task's whole validation set (`cvbench eval`).

`checkpoint_trainer(task, path, ...)` is the Trainer to evaluate: for a checkpoint, the
task's model with the checkpoint's weights; for a `.keras` file with a `ModelInfo` (what
cvbench writes for users, taking `[0, 255]` RGB), the file's model behind a layer that maps
the classification pipeline's normalized images back to `[0, 255]`. A model for another
number of classes than the task's data is an error saying so, not a shape message.

`saved_run(path)` is what the file records of the run that made it (the model, its recipe
with every knob after overrides, hence its image size and preprocessing), so that `cvbench
eval` evaluates a model as it was trained without the flags repeated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cvbench.tasks.base import Task
from cvbench.tasks.runner import build_trainer
from cvbench.training.config import TrainConfig


def checkpoint_trainer(
    task: Task, path: str | Path, *, precision: str = "auto", seed: int | None = None
) -> Any:
    """The Trainer of `task` holding the model saved at `path` (see the module docstring).

    Raises:
        ValueError: a model for another task, another number of classes or other class
            names (`check_class_names`); a checkpoint of another model.
        FileNotFoundError: no valid checkpoint in a run folder.
    """
    from cvbench.training.checkpoint import find_checkpoint

    path = Path(path)
    check_class_names(path, task)
    config = TrainConfig(progress_bar=False, log_every=0, seed=seed)
    model = None
    if path.suffix == ".keras":
        model = evaluation_model(path, task)
        check_classes(output_classes(model), task, path)
        precision = _policy_of(model)
    if model is None and hasattr(task, "restore_from_checkpoint"):
        task.restore_from_checkpoint()  # every weight comes from the checkpoint below
    trainer = build_trainer(task, precision=precision, config=config, model=model)
    if model is None:
        load_checkpoint_weights(trainer, find_checkpoint(path), task)
    return trainer


def saved_run(path: str | Path) -> dict[str, Any]:
    """What the model saved at `path` records of its run, as `TaskOptions` fields:
    `{"model": name, "recipe": Recipe}`, the recipe carrying the run's knobs (image size,
    preprocessing, classes, ...), each knob that differs from the named recipe recorded as a
    deviation "the run of <path>". A checkpoint or a run folder: its run settings (what
    `--resume` checks); a `.keras` file with a `ModelInfo`: its model at its image size.
    `{}` when the file records neither (or names a model without a recipe here).

    Raises:
        FileNotFoundError: a run folder without a valid checkpoint.
        ValueError: a damaged checkpoint; a `.keras` file with an unreadable `ModelInfo`.
    """
    from cvbench.tasks.recipes import default_recipe, get_recipe

    path = Path(path)
    if path.suffix == ".keras":
        from cvbench.utils.model_file import read_model_info

        info = read_model_info(path)
        if info is None or info.model is None:
            return {}
        recipe = _recipe_or_none(lambda: default_recipe(info.model))
        # knobs the recipe does not have are left out (`_with_knobs`): an SSD's recipe has no
        # model knobs (its size is fixed, its classes are its data's)
        knobs = {"model.image_size": info.image_size[0], "model.num_classes": info.num_classes}
    else:
        from cvbench.training.checkpoint import find_checkpoint, read_checkpoint_meta

        meta = read_checkpoint_meta(find_checkpoint(path))
        settings = meta.get("state", {}).get("settings") or {}
        if not settings.get("recipe"):
            return {}
        recipe = _recipe_or_none(lambda: get_recipe(settings["recipe"]))
        knobs = settings.get("knobs") or {}
    if recipe is None:
        return {}
    return {"model": recipe.model, "recipe": _with_knobs(recipe, knobs, f"the run of {path}")}


def _recipe_or_none(get: Any) -> Any:
    try:
        return get()
    except (KeyError, ValueError):  # a recipe or model this version does not have
        return None


def _with_knobs(recipe: Any, knobs: dict[str, Any], reason: str) -> Any:
    """`recipe` with the stored `knobs` (JSON values: lists for tuples) that differ from
    its own; knobs it does not have (another version's) are left out."""
    current = dict(recipe.knobs())
    changes = {}
    for knob, stored in knobs.items():
        if knob not in current:
            continue
        value = tuple(stored) if isinstance(current[knob], tuple) else stored
        if value != current[knob]:
            changes[knob] = value
    return recipe.with_overrides(changes, reason=reason) if changes else recipe


def evaluation_model(path: Path, task: Task) -> Any:
    """The `.keras` model at `path` as the task's evaluation data needs it.

    A file with a `ModelInfo` (what cvbench writes for users) takes `[0, 255]` RGB, which the
    task puts back behind its own pipeline (`task.from_user_model`: the classification
    pipeline's normalized images mapped back to `[0, 255]`, `x * std + mean`; detection data
    is `[0, 255]` already); a file without `ModelInfo` (older exports) is used as it is.
    Either is loaded by `cvbench.utils.model_file.load_model`, with its checks (a regular
    file, archive sizes, safe mode).

    Raises:
        BadFileError: a file that is not a regular file or a valid `.keras` archive, or an
            unreadable `ModelInfo`.
        ValueError: a model of another task.
    """
    from cvbench.utils.model_file import load_model, read_model_info

    info = read_model_info(path)
    if info is not None and info.task != task.name:
        raise ValueError(f"{path} is a {info.task} model, not {task.name}")
    model, _ = load_model(path)
    return model if info is None else task.from_user_model(model)


def _policy_of(model: Any) -> str:
    name = model.dtype_policy.name
    return name if name in ("mixed_float16", "mixed_bfloat16") else "float32"


def output_classes(model: Any) -> int | None:
    """The classes a classifier (logits `(B, C)`) or an SSD (`{"classes": (B, N, C)}`)
    predicts, or None for another kind of output."""
    try:
        output = model.output
    except AttributeError:  # a Sequential loaded from a file has `outputs`, not `output`
        outputs = getattr(model, "outputs", None) or []
        output = outputs[0] if len(outputs) == 1 else None
    if isinstance(output, dict):
        output = output.get("classes")
    shape = getattr(output, "shape", None)
    return shape[-1] if shape else None


def check_classes(model_classes: int | None, task: Task, source: Path) -> None:
    """A one-line error when the model in `source` predicts another number of classes than
    the task's data has (instead of a shape error or a silently wrong evaluation).

    Raises:
        ValueError: naming both numbers and what to do.
    """
    if model_classes is None or model_classes == task.num_classes:
        return
    if task.class_names is not None:
        data = f"the data in {task.options.data_dir} has {task.num_classes} (its dataset_info.json)"
        hint = "evaluate it on the data it was trained on"
    else:
        data = f"the task has {task.num_classes}"
        hint = f"pass --num-classes {model_classes}"
    raise ValueError(f"{source} holds a model for {model_classes} classes but {data}; {hint}")


def saved_class_names(path: Path) -> tuple[str, ...] | None:
    """The class names (model index -> name) the model saved at `path` was trained with: a
    `.keras` file's `ModelInfo.class_names`, a checkpoint's (or a run folder's newest
    checkpoint's) run identity (`class_names`, what `--resume` compares); None when the
    file records none (an older file, a `.keras` without `ModelInfo`).

    Raises:
        FileNotFoundError: a run folder without a valid checkpoint.
        ValueError: a damaged checkpoint; a `.keras` file with an unreadable `ModelInfo`.
    """
    if path.suffix == ".keras":
        from cvbench.utils.model_file import read_model_info

        info = read_model_info(path)
        return None if info is None else tuple(info.class_names)
    from cvbench.training.checkpoint import find_checkpoint, read_checkpoint_meta

    settings = read_checkpoint_meta(find_checkpoint(path)).get("state", {}).get("settings")
    names = (settings or {}).get("class_names")
    return None if names is None else tuple(names)


def check_class_names(path: Path, task: Task) -> None:
    """A one-line error, before anything is built or evaluated, when the model saved at
    `path` was trained on other classes than the task's records hold (its
    `dataset_info.json`): same count, other names, so every label means another class and
    the metrics would be a confident wrong number (top-1 0). The rule of `--resume`
    (`cvbench.utils.model_file.class_name_differences`): records or models without names
    (older files, synthetic data, `--num-classes` only) are not compared.

    Raises:
        ValueError: naming the first differing classes, the model file and the records'
            `dataset_info.json`.
    """
    from cvbench.data.dataset_info import DATASET_INFO_NAME
    from cvbench.utils.model_file import class_name_differences

    if task.class_names is None or task.options.data_dir is None:
        return
    info = Path(task.options.data_dir) / DATASET_INFO_NAME
    where = ("in the model", f"in {info}")
    difference = class_name_differences(
        saved_class_names(path), task.class_names, where=where, indices_unnamed=True
    )
    if difference is not None:
        raise ValueError(
            f"{path} holds a model for other classes than the data in {task.options.data_dir} "
            f"({difference}); evaluate it on the records it was trained on"
        )


def load_checkpoint_weights(trainer: Any, path: Path, task: Task) -> None:
    """`trainer.load_weights(path)`; a checkpoint of a model for another number of classes
    is a one-line error saying so (`check_classes`), not a shape message."""
    from cvbench.utils.errors import BadFileError

    try:
        trainer.load_weights(path)
    except BadFileError:
        raise  # the file itself is bad: nothing to compare with the model
    except ValueError:
        from cvbench.training.checkpoint import load_checkpoint

        stored = [info["shape"] for info in load_checkpoint(path)[0]["model"]]
        for shape, variable in zip(stored, trainer.model.variables, strict=False):
            mine = list(variable.shape)
            if shape != mine and len(shape) == len(mine) and shape[:-1] == mine[:-1]:
                per_class, rest = divmod(mine[-1], task.num_classes)  # SSD: anchors x classes
                if rest == 0 and per_class and shape[-1] % per_class == 0:
                    check_classes(shape[-1] // per_class, task, path)
                break
        raise
