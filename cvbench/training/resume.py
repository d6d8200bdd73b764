"""Resuming a run: the plan each checkpoint records, what a new run must agree on, and the
restore that refuses a checkpoint of another plan.

A checkpoint's state holds the run's plan (epochs, steps per epoch, planned steps, global
batch, precision, model name; `run_plan`). `--resume` (`TrainConfig.resume`) into a run whose
plan differs (`plan_differences`, which also compares every variable's shape) is refused with
a message naming each difference, unless `force_resume` is set: then it resumes with a
warning naming them.
"""

from __future__ import annotations

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
) -> dict[str, Any]:
    """The plan stored in each checkpoint's state (steps per epoch derived from the rest)."""
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
    }


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
