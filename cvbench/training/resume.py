"""Resuming a run: the plan each checkpoint records, what a new run must agree on, and the
restore that refuses a checkpoint of another plan.

A checkpoint's state holds the run's plan (`run_plan`): epochs, steps per epoch, planned
steps, global batch, precision, model name, and the settings that decide what the steps do:
the optimizer (kind, learning rate, momentum, weight decay, ...), the learning-rate schedule,
and the task's settings (`Trainer.run_settings`: image size, label smoothing, the recipe and
every knob of it after overrides). `--resume` (`TrainConfig.resume`) into a run whose plan
differs (`plan_differences`, which also compares every variable's shape) is refused with a
message naming each difference, unless `force_resume` is set: then it resumes with a warning
naming them. A key an older checkpoint lacks is not compared.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from cvbench.training import checkpoint as ckpt


def run_plan(
    *,
    global_batch: int | None,
    precision: str,
    planned_steps: int | None,
    epochs: int | None,
    model_name: str,
    optimizer: Any = None,
    schedule: Any = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan stored in each checkpoint's state (steps per epoch derived from the rest;
    `optimizer`, `schedule` and `settings` as JSON values: `describe`)."""
    steps = None
    if planned_steps is not None and epochs:
        steps = planned_steps // epochs
    return {
        "global_batch": global_batch,
        "precision": precision,
        "planned_steps": planned_steps,
        "epochs": epochs,
        "steps_per_epoch": steps,
        "model": model_name,
        "optimizer": describe(optimizer),
        "schedule": describe(schedule),
        "settings": describe(settings or {}),
    }


def describe(value: Any) -> Any:
    """`value` as plain JSON data, for storing and comparing: dataclasses (`OptimizerConfig`,
    `ScheduleConfig`) as dicts, Keras optimizers and schedules as their class and config
    (without the optimizer's name), anything else JSON cannot hold as its text.

    Example:
        >>> from cvbench.training.config import ScheduleConfig
        >>> describe(ScheduleConfig(base_lr=0.2))["base_lr"]
        0.2
        >>> describe(0.1), describe(None)
        (0.1, None)
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {"class": type(value).__name__, **dataclasses.asdict(value)}
    elif hasattr(value, "get_config") and not isinstance(value, dict):
        config = dict(value.get_config())
        config.pop("name", None)
        value = {"class": type(value).__name__, **config}
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}.{key}"))
        return flat
    return {prefix: value}


def _setting_differences(stored: dict, now: dict) -> list[str]:
    """The optimizer, schedule and task settings that differ, one entry per value."""
    differences = []
    for group in ("optimizer", "schedule", "settings"):
        if group not in stored or group not in now:
            continue  # an older checkpoint: not recorded
        old, new = _flat(stored[group], group), _flat(now[group], group)
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                before = json.dumps(old[key]) if key in old else "unset"
                after = json.dumps(new[key]) if key in new else "unset"
                differences.append(f"{key} {before} in the checkpoint, {after} now")
    return differences


def plan_differences(now: dict[str, Any], meta: dict, variables: list) -> list[str]:
    """How this run's plan `now` (and its model's `variables`) differs from the checkpointed
    run's (`meta`): "epochs 2 in the checkpoint, 4 now", ...; keys an older checkpoint lacks
    are not compared."""
    stored = meta.get("state", {})
    keys = ["epochs", "steps_per_epoch"]
    if stored.get("epochs") is None:
        keys = ["planned_steps"]
    differences = [
        f"{key.replace('_', ' ')} {stored[key]} in the checkpoint, {now[key]} now"
        for key in [*keys, "global_batch", "precision"]
        if stored.get(key) is not None and now[key] is not None and stored[key] != now[key]
    ]
    differences += _setting_differences(stored, now)
    shapes = [tuple(info["shape"]) for info in meta["model"]]
    names = (_base_name(stored.get("model")), _base_name(now["model"]))
    mine = [tuple(v.shape) for v in variables]
    if shapes != mine or (None not in names and names[0] != names[1]):
        differences.append(
            f"model {_model_summary(names[0], shapes)} in the checkpoint, "
            f"{_model_summary(names[1], mine)} now"
        )
    return differences


def restore_checked(trainer: Any, path: Path, meta: dict, arrays: dict) -> dict:
    """Restores `trainer`'s model and optimizer from the checkpoint at `path` after the plan
    check; returns the checkpointed trainer state, or `{"refused": message}`."""
    differences = "; ".join(plan_differences(trainer._plan(), meta, trainer.model.variables))
    if differences and not trainer.config.force_resume:
        return {
            "refused": f"cannot resume from {path}: this run differs from the "
            f"checkpointed one ({differences}); pass force_resume=True to resume anyway, "
            "or train in another log directory"
        }
    if differences:
        warnings.warn(
            f"resuming from {path} although this run differs from the checkpointed one "
            f"({differences}), as force_resume=True asks",
            stacklevel=6,
        )
    try:
        ckpt.restore_variables(
            meta,
            arrays,
            model_variables=trainer.model.variables,
            optimizer_variables=trainer.optimizer.variables,
        )
    except ValueError as e:
        return {"refused": f"cannot resume from {path}: {e}"}
    state = dict(meta["state"], path=str(path))
    print(f"cvbench: resumed from {path} (step {state['step']})", flush=True)
    return state


def _base_name(name: str | None) -> str | None:
    """A model name without the `_<n>` Keras appends to make names unique in a session."""
    return None if name is None else re.sub(r"_\d+$", "", name)


def _model_summary(name: str | None, shapes: list[tuple]) -> str:
    count = sum(int(np.prod(shape)) for shape in shapes)
    named = f"{name!r} with " if name is not None else ""
    return f"{named}{count:,} values in {len(shapes)} variables"
