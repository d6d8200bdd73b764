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

What the labels mean and where randomness starts are recorded too (`run_identity`, among the
settings, by the Trainer): the class names (index -> name, the data set's `dataset_info.json`
where there is one, which the export carries) and the seed. Records rebuilt after renaming
one class folder shift every label: the resume names the classes that differ (`class 1 'dog'
in the checkpoint, 'wolf' now`) and is refused like any other difference. A changed seed is
named in a warning (`seed_change`), not refused: the checkpoint restores the weights, the
optimizer and the data order reached; the new seed only draws the shuffles and augmentations
of the epochs still to come. So is another input pipeline (`pipeline_change`: tf.data,
grain or DALI, the task's `data_pipeline` setting), whose order and augmentation differ;
another Keras backend (`backend_change`: a TensorFlow run resumed under JAX computes and
draws its random numbers differently); and other training records (`records_change`: the
`train_records` setting, the identity of the training shard set: a rebuilt or resharded
folder puts other records in the batches the restored data position counts).

A resume whose run folder holds checkpoints none of which is valid is refused
(`check_resumed`: a `BadFileError` naming them) rather than started again at step 0, which
would log the same step numbers a second time; removing them (or another log directory)
starts the run over.

A run resumed on another number of ranks (a node lost, `--resume` on the nodes left) is not a
different plan when only the world size changed (`world_size_change`): the same images per
rank and step, the same planned images and epochs, the same settings. The new run's own plan
(the recipe's scaling rule at the new global batch: its rate, steps per epoch, total and warmup
steps) then continues from the same point of the run counted in images: the step counters are
converted (`step x old global batch / new global batch`), so that the run ends at the planned
number of images, and the schedule sits where it was.
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
from cvbench.utils.errors import BadFileError
from cvbench.utils.model_file import class_name_differences, current_setting

#: The settings (`Trainer.run_settings`) that say what the labels mean, where the
#: randomness starts, what reads the data, what computes the steps and which records the
#: data position counts, compared with messages of their own (`_class_name_differences`,
#: `seed_change`, `pipeline_change`, `backend_change`, `records_change`).
IDENTITY_KEYS = (
    "class_names", "seed", "data_pipeline", "data_workers", "keras_backend", "train_records"
)  # fmt: skip


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
    ranks: int | None = None,
) -> dict[str, Any]:
    """The plan stored in each checkpoint's state (steps per epoch derived from the rest;
    `optimizer`, `schedule` and `settings` as JSON values: `describe`; `ranks` the world
    size)."""
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
        "ranks": ranks,
    }


#: Counters of the trainer state that count steps (converted when the world size changes).
STEP_COUNTERS = ("step", "batch_in_epoch", "consumed")


def world_size_change(stored: dict[str, Any], now: dict[str, Any]) -> dict[str, int] | None:
    """`{"ranks_before", "ranks", "global_batch_before", "global_batch"}` when the checkpointed
    plan `stored` and this run's plan `now` differ in the number of ranks only: the same
    images per rank and step, per epoch (`steps_per_epoch x global_batch`) and in all
    (`planned_steps x global_batch`), the same epochs and warmup in images; else None.

    Example (4 ranks x 2 images, 12 steps, resumed on 2 ranks x 2: 24 steps of 4):
        >>> old = {"ranks": 4, "global_batch": 8, "planned_steps": 12, "epochs": 6,
        ...        "steps_per_epoch": 2, "schedule": {"warmup_steps": 2}}
        >>> new = {"ranks": 2, "global_batch": 4, "planned_steps": 24, "epochs": 6,
        ...        "steps_per_epoch": 4, "schedule": {"warmup_steps": 4}}
        >>> world_size_change(old, new)["global_batch"]
        4
        >>> world_size_change(old, dict(new, planned_steps=20)) is None
        True
    """
    keys = ("ranks", "global_batch", "planned_steps")
    if any(not isinstance(stored.get(k), int) or not isinstance(now.get(k), int) for k in keys):
        return None
    if stored["ranks"] == now["ranks"]:
        return None
    old_gb, new_gb = stored["global_batch"], now["global_batch"]
    if old_gb * now["ranks"] != new_gb * stored["ranks"]:  # another batch per rank
        return None
    if stored.get("epochs") != now.get("epochs"):
        return None
    for key in ("planned_steps", "steps_per_epoch"):
        if stored.get(key) is not None and stored[key] * old_gb != (now.get(key) or 0) * new_gb:
            return None
    warmups = [(p.get("schedule") or {}) for p in (stored, now)]
    if isinstance(warmups[0], dict) and isinstance(warmups[1], dict):
        old_w, new_w = warmups[0].get("warmup_steps"), warmups[1].get("warmup_steps")
        if isinstance(old_w, int) and isinstance(new_w, int) and old_w * old_gb != new_w * new_gb:
            return None
    return {
        "ranks_before": stored["ranks"],
        "ranks": now["ranks"],
        "global_batch_before": old_gb,
        "global_batch": new_gb,
    }


def _without_world_size(plan: dict[str, Any]) -> dict[str, Any]:
    """`plan` without what follows from the world size (compared by `world_size_change`)."""
    out = {k: v for k, v in plan.items() if k not in
           ("ranks", "global_batch", "planned_steps", "steps_per_epoch")}  # fmt: skip
    if isinstance(out.get("schedule"), dict):
        out["schedule"] = {k: v for k, v in out["schedule"].items() if k != "warmup_steps"}
    return out


def convert_steps(state: dict[str, Any], change: dict[str, int]) -> dict[str, Any]:
    """The checkpointed trainer `state` counted in steps of the new global batch (the same
    images); raises ValueError when a counter is not a whole number of new steps.

    Example:
        >>> change = {"global_batch_before": 8, "global_batch": 4}
        >>> convert_steps({"step": 3, "batch_in_epoch": 1, "consumed": 3}, change)["step"]
        6
    """
    old_gb, new_gb = change["global_batch_before"], change["global_batch"]
    out = dict(state)
    for key in (*STEP_COUNTERS, "iterations"):
        if not isinstance(state.get(key), int):
            continue
        images = state[key] * old_gb
        if images % new_gb:
            raise ValueError(
                f"{key} {state[key]} at global batch {old_gb} is {images} images, not a whole "
                f"number of steps at global batch {new_gb}"
            )
        out[key] = images // new_gb
    return out


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


def run_identity(
    *, seed: int | None, class_names: Any, keras_backend: str | None = None
) -> dict[str, Any]:
    """The run's seed and class names (index -> name) as the Trainer records them among its
    settings (`IDENTITY_KEYS`), and with `keras_backend` the Keras backend that runs the
    steps ("tensorflow", "jax"); `class_names` None (a model without names) is recorded as
    None.

    Example:
        >>> run_identity(seed=0, class_names=("cat", "dog"))
        {'class_names': ['cat', 'dog'], 'seed': 0}
        >>> run_identity(seed=0, class_names=None, keras_backend="jax")["keras_backend"]
        'jax'
    """
    names = None if class_names is None else [str(name) for name in class_names]
    identity: dict[str, Any] = {"class_names": names, "seed": seed}
    if keras_backend is not None:
        identity["keras_backend"] = keras_backend
    return identity


def _class_name_differences(stored: dict, now: dict) -> list[str]:
    """The class names that differ between the settings `stored` in a checkpoint and `now`
    (`model_file.class_name_differences`, the rule `cvbench eval` applies too); not
    compared when the checkpoint lacks them (written before they were recorded).

    Example:
        >>> stored = {"class_names": ["cat", "dog", "eel"]}
        >>> _class_name_differences(stored, {"class_names": ["cat", "wolf", "eel"]})
        ["class names: 1 of 3 differ (class 1 'dog' in the checkpoint, 'wolf' now)"]
    """
    difference = class_name_differences(stored.get("class_names"), now.get("class_names"))
    return [] if difference is None else [difference]


def _settings_pair(meta: dict, now: dict[str, Any]) -> tuple[dict, dict]:
    """The run settings a checkpoint's `meta` recorded and those of the plan `now` (`{}`
    where either has none)."""
    return (meta.get("state") or {}).get("settings") or {}, now.get("settings") or {}


def seed_change(meta: dict, now: dict[str, Any]) -> str | None:
    """`"seed 0 in the checkpoint, 1 now"` when this run's plan `now` has another seed than
    the checkpointed run's (`meta`); None when they agree or the checkpoint has none
    recorded.

    Example:
        >>> seed_change({"state": {"settings": {"seed": 0}}}, {"settings": {"seed": 1}})
        'seed 0 in the checkpoint, 1 now'
    """
    stored, settings = _settings_pair(meta, now)
    seed = settings.get("seed")
    if "seed" not in stored or stored["seed"] == seed:
        return None
    return f"seed {stored['seed']} in the checkpoint, {seed} now"


def pipeline_change(meta: dict, now: dict[str, Any]) -> str | None:
    """`"data pipeline 'tf' in the checkpoint, 'grain' now"` when this run's plan `now`
    reads its data through another pipeline (the task's `data_pipeline` setting: tf.data,
    grain, DALI order and augment differently) than the checkpointed run's (`meta`), or
    through grain with another number of workers (`data_workers`: each grain worker batches
    the records dealt to it, so which records share a batch depends on it); None when they
    agree or either side records none (an older checkpoint, a caller's own data).

    Example:
        >>> pipeline_change({"state": {"settings": {"data_pipeline": "tf"}}},
        ...                 {"settings": {"data_pipeline": "grain"}})
        "data pipeline 'tf' in the checkpoint, 'grain' now"
        >>> pipeline_change({"state": {"settings": {"data_pipeline": "grain", "data_workers": 0}}},
        ...                 {"settings": {"data_pipeline": "grain", "data_workers": 2}})
        'grain with 0 data workers in the checkpoint, 2 now'
    """
    stored, settings = _settings_pair(meta, now)
    before, pipeline = stored.get("data_pipeline"), settings.get("data_pipeline")
    if before is None or pipeline is None:
        return None
    if before != pipeline:
        return f"data pipeline {before!r} in the checkpoint, {pipeline!r} now"
    workers_before, workers = stored.get("data_workers"), settings.get("data_workers")
    if workers_before is None or workers is None or workers_before == workers:
        return None
    return f"{pipeline} with {workers_before} data workers in the checkpoint, {workers} now"


def backend_change(meta: dict, now: dict[str, Any]) -> str | None:
    """`"tensorflow in the checkpoint, jax now"` when this run's plan `now` runs its steps
    on another Keras backend (the `keras_backend` setting) than the checkpointed run's
    (`meta`): its kernels round differently and its random numbers (initial values,
    dropout, in-model augmentation) are other numbers; None when they agree or either side
    records none (a checkpoint written before the backend was recorded).

    Example:
        >>> backend_change({"state": {"settings": {"keras_backend": "tensorflow"}}},
        ...                {"settings": {"keras_backend": "jax"}})
        'tensorflow in the checkpoint, jax now'
        >>> backend_change({"state": {"settings": {}}}, {"settings": {"keras_backend": "jax"}})
    """
    stored, settings = _settings_pair(meta, now)
    before, backend = stored.get("keras_backend"), settings.get("keras_backend")
    if before is None or backend is None or before == backend:
        return None
    return f"{before} in the checkpoint, {backend} now"


def records_change(meta: dict, now: dict[str, Any]) -> str | None:
    """`"2 shards, 16 records, 24,352 bytes in the checkpoint, 1 shard, 16 records, 24,300
    bytes now"` when this run's training records (the `train_records` setting: the
    identity of the shard set, `cvbench.data.read.splits.records_identity`) are another
    build or sharding than the checkpointed run's (`meta`); the data position a checkpoint
    restores counts batches of its own records. `"other shard files (...)"` when only their
    names or sizes differ. None when they agree or either side records none (an older
    checkpoint, synthetic data, a caller's own data). Records moved to another folder keep
    their identity, and so does a copy of the shards without the build manifest (the
    record count is compared only where both sides know it).

    Example:
        >>> old = {"shards": 2, "records": 16, "bytes": 24352, "files_sha256": "ab"}
        >>> new = {"shards": 1, "records": 16, "bytes": 24300, "files_sha256": "cd"}
        >>> print(records_change({"state": {"settings": {"train_records": old}}},
        ...                      {"settings": {"train_records": new}}))
        2 shards, 16 records, 24,352 bytes in the checkpoint, 1 shard, 16 records, 24,300 bytes now
        >>> records_change({"state": {"settings": {"train_records": old}}},
        ...                {"settings": {"train_records": dict(old, files_sha256="cd")}})
        'other shard files (2 shards, 16 records, 24,352 bytes in both)'
        >>> records_change({"state": {"settings": {"train_records": old}}},
        ...                {"settings": {"train_records": dict(old, records=None)}}) is None
        True
    """
    stored, settings = _settings_pair(meta, now)
    before, records = stored.get("train_records"), settings.get("train_records")
    if not isinstance(before, dict) or not isinstance(records, dict):
        return None
    # The record count is the build manifest's: a copy of the shards without it counts None.
    known = [k for k in before if k != "records" or None not in (before[k], records.get(k))]
    if all(before.get(k) == records.get(k) for k in known):
        return None
    old, new = _records_words(before), _records_words(records)
    if old == new:
        return f"other shard files ({old} in both)"
    return f"{old} in the checkpoint, {new} now"


def _records_words(identity: dict) -> str:
    """`"2 shards, 16 records, 24,352 bytes"` of a `train_records` identity (the records
    left out when unknown)."""
    parts = []
    for key, noun in (("shards", "shard"), ("records", "record"), ("bytes", "byte")):
        value = identity.get(key)
        if isinstance(value, int):
            parts.append(f"{value:,} {noun}{'' if value == 1 else 's'}")
    return ", ".join(parts) or "unknown records"


def _without_identity(plan: dict[str, Any]) -> dict[str, Any]:
    """`plan` with its settings without `IDENTITY_KEYS`."""
    settings = plan.get("settings")
    if not isinstance(settings, dict):
        return plan
    kept = {k: v for k, v in settings.items() if k not in IDENTITY_KEYS}
    return dict(plan, settings=kept)


def check_resumed(step: int, directory: Path | None, distribution: Any) -> None:
    """After a resume that restored nothing (the run still at `step` 0): raises when the
    run's checkpoint folder `directory` holds checkpoints, all of them invalid (each was
    skipped with a warning), instead of letting the run start again at step 0. Every rank of
    `distribution` calls it; rank 0 looks and tells the others.

    Raises:
        BadFileError: naming the folder and its invalid checkpoints.
    """
    message = None
    if distribution.is_chief and step == 0:
        invalid = ckpt.CheckpointManager(directory).checkpoints() if directory else []
        if invalid:
            names = ", ".join(p.name for p in reversed(invalid))
            message = (
                f"cannot resume from {directory}: none of its {len(invalid)} checkpoints is "
                f"valid ({names}; the warnings above say why): remove them to start this run "
                "over, or train in another log directory"
            )
    message = distribution.broadcast_object(message)
    if message is not None:
        raise BadFileError(message)


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}.{key}"))
        return flat
    return {prefix: value}


class _Unset:
    """A setting one side does not record (`compare_settings`)."""

    def __repr__(self) -> str:
        return "unset"


#: What `compare_settings` gives for the side that lacks a setting.
UNSET = _Unset()


def compare_settings(stored: dict[str, Any], now: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The one comparison of a checkpoint's recorded settings with the current ones: the keys
    whose values differ, each with `(stored value, current value)`, `UNSET` on the side that
    lacks the key (a lacking key equals a None: not a difference); sorted by key. Both sides
    are compared as the checkpoint stores them (`describe`: tuples as lists), and a stored
    value in a former spelling as today's (`current_setting`), so that a run written before
    still agrees. The resume's check (`plan_differences`) and the task's check of an older
    checkpoint (`ClassificationTask.restore_from_checkpoint`) both use it.

    Example:
        >>> stored = {"preprocessing.mean": [1.0, 2.0], "preprocessing.eval_crop":
        ...           "resize_then_crop", "old": 1}
        >>> now = {"preprocessing.mean": (1.0, 2.0), "preprocessing.eval_crop": "center_crop",
        ...        "new": 2}
        >>> compare_settings(stored, now)
        {'new': (unset, 2), 'old': (1, unset)}
        >>> compare_settings({}, {"model.weights_normalization": None})  # an older checkpoint
        {}
    """
    old = {key: describe(current_setting(key, value)) for key, value in stored.items()}
    new = {key: describe(value) for key, value in now.items()}
    # A key one side lacks equals None on the other: a knob added since with a None default
    # (model.weights_normalization) leaves an older checkpoint resumable.
    return {
        key: (old.get(key, UNSET), new.get(key, UNSET))
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    }


def _setting_differences(stored: dict, now: dict) -> list[str]:
    """The optimizer, schedule and task settings that differ, one entry per value."""
    differences = []
    for group in ("optimizer", "schedule", "settings"):
        if group not in stored or group not in now:
            continue  # an older checkpoint: not recorded
        changed = compare_settings(_flat(stored[group], group), _flat(now[group], group))
        for key, (before, after) in changed.items():
            before = "unset" if before is UNSET else json.dumps(before)
            after = "unset" if after is UNSET else json.dumps(after)
            differences.append(f"{key} {before} in the checkpoint, {after} now")
    return differences


def plan_differences(now: dict[str, Any], meta: dict, variables: list) -> list[str]:
    """How this run's plan `now` (and its model's `variables`) differs from the checkpointed
    run's (`meta`): "epochs 2 in the checkpoint, 4 now", ...; keys an older checkpoint lacks
    are not compared."""
    stored = meta.get("state", {})
    if world_size_change(stored, now) is not None:
        stored, now = _without_world_size(stored), _without_world_size(now)
    classes = _class_name_differences(stored.get("settings") or {}, now.get("settings") or {})
    stored, now = _without_identity(stored), _without_identity(now)
    keys = ["epochs", "steps_per_epoch"]
    if stored.get("epochs") is None:
        keys = ["planned_steps"]
    differences = [
        f"{key.replace('_', ' ')} {stored[key]} in the checkpoint, {now[key]} now"
        for key in [*keys, "global_batch", "precision"]
        if stored.get(key) is not None and now.get(key) is not None and stored[key] != now[key]
    ]
    differences += classes + _setting_differences(stored, now)
    shapes = [tuple(info["shape"]) for info in meta["model"]]
    names = (_base_name(stored.get("model")), _base_name(now["model"]))
    mine = [tuple(v.shape) for v in variables]
    if shapes != mine or (None not in names and names[0] != names[1]):
        differences.append(
            f"model {_model_summary(names[0], shapes)} in the checkpoint, "
            f"{_model_summary(names[1], mine)} now"
        )
    return differences


@dataclasses.dataclass(frozen=True)
class ResumeTarget:
    """What a resume restores into and checks a checkpoint against (the Trainer's).

    Attributes:
        plan: this run's plan (`run_plan`).
        model_variables: the model's variables.
        optimizer: the built optimizer (a `LossScaleOptimizer` or a plain one).
        force_resume: resume a checkpoint of another plan, with a warning.
        is_chief: this is rank 0 (which prints and warns).
        run_events: where a world-size change is added as a `("world_size", fields)` event.
    """

    plan: dict[str, Any]
    model_variables: list
    optimizer: Any
    force_resume: bool
    is_chief: bool
    run_events: list


def restore_checked(target: ResumeTarget, path: Path, meta: dict, arrays: dict) -> dict:
    """Restores `target`'s model and optimizer from the checkpoint at `path` after the plan
    check; returns the checkpointed trainer state, `{"refused": message}`, or
    `{"bad_file": message}` for a checkpoint whose state has a field of the wrong type or
    range (`checkpoint.check_state`; nothing restored)."""
    try:
        ckpt.check_state(path, meta)
    except BadFileError as e:
        return {"bad_file": str(e)}
    refusal = _refusal(target, path, meta)
    if refusal is not None:
        return {"refused": refusal}
    change = world_size_change(meta.get("state", {}), target.plan)
    state = dict(meta["state"], path=str(path))
    inner = getattr(target.optimizer, "inner_optimizer", target.optimizer)
    if change is not None:
        try:
            iterations = _checkpointed_iterations(meta, arrays, inner)
            state = convert_steps(dict(state, iterations=iterations), change)
        except ValueError as e:
            return {"refused": f"cannot resume from {path} on {change['ranks']} ranks: {e}"}
    try:
        ckpt.restore_variables(
            meta,
            arrays,
            model_variables=target.model_variables,
            optimizer_variables=target.optimizer.variables,
        )
    except ValueError as e:
        return {"refused": f"cannot resume from {path}: {e}"}
    if change is None:
        if target.is_chief:
            print(f"cvbench: resumed from {path} (step {state['step']})", flush=True)
        return state
    if state.get("iterations") is not None:
        inner.iterations.assign(state["iterations"])
    _record_world_size(target, path, meta, state, change)
    return state


def _refusal(target: ResumeTarget, path: Path, meta: dict) -> str | None:
    """Why the checkpoint at `path` cannot be resumed (its plan differs and `force_resume`
    is not set), or None; warns about a forced resume and a changed seed."""
    differences = "; ".join(plan_differences(target.plan, meta, target.model_variables))
    if differences and not target.force_resume:
        return (
            f"cannot resume from {path}: this run differs from the "
            f"checkpointed one ({differences}); pass force_resume=True to resume anyway, "
            "or train in another log directory"
        )
    if differences:
        warnings.warn(
            f"resuming from {path} although this run differs from the checkpointed one "
            f"({differences}), as force_resume=True asks",
            stacklevel=7,
        )
    for change, words in _NAMED_CHANGES:
        changed = change(meta, target.plan)
        if changed is not None and target.is_chief:
            warnings.warn(f"resuming from {path} {words.format(changed)}", stacklevel=7)
    return None


#: The changes a resume names in a warning, not refused: what tells each, and its words.
_NAMED_CHANGES = (
    (
        seed_change,
        "with another seed ({}): the weights, optimizer and data order are the "
        "checkpoint's; the epochs still to come shuffle and augment with the new seed",
    ),
    (
        pipeline_change,
        "through another input pipeline ({}): the rest of the run reads its images in "
        "another order, another augmentation or other batches, so it is not the run the "
        "checkpoint's would have been",
    ),
    (
        backend_change,
        "on another Keras backend ({}): the weights and optimizer are the checkpoint's, but "
        "the steps still to come compute and draw their random numbers differently, so the "
        "rest of the run is not the run the checkpoint's would have been",
    ),
    (
        records_change,
        "with other training records ({}): the data position restored counts batches of the "
        "checkpoint's records, so the rest of the run reads other batches: it is not the run "
        "the checkpoint's would have been",
    ),
)


def _record_world_size(
    target: ResumeTarget, path: Path, meta: dict, state: dict, change: dict
) -> None:
    """Adds the `world_size` event of a resume on another number of ranks to the run's
    events, and says so on rank 0."""
    plan_now = target.plan
    old_step, old_gb = meta["state"]["step"], change["global_batch_before"]
    fields = dict(change, step_before=old_step, step=state["step"], images=old_step * old_gb,
                  planned_steps=plan_now["planned_steps"],
                  planned_images=plan_now["planned_steps"] * change["global_batch"])  # fmt: skip
    target.run_events.append(("world_size", fields))
    if not target.is_chief:
        return
    print(
        f"cvbench: resumed from {path} (step {old_step} at {change['ranks_before']} ranks, "
        f"global batch {old_gb}: {fields['images']} images) on {change['ranks']} ranks: "
        f"global batch {change['global_batch']}, step {state['step']} of "
        f"{plan_now['planned_steps']} ({fields['planned_images']} images planned)",
        flush=True,
    )


def _checkpointed_iterations(meta: dict, arrays: dict, optimizer: Any) -> int | None:
    """The optimizer's step count in the checkpoint (its `iterations` variable), or None."""
    target = getattr(getattr(optimizer, "iterations", None), "path", None)
    for i, info in enumerate(meta.get("optimizer", [])):
        if target is not None and info.get("path") == target:
            return int(np.asarray(arrays[f"optimizer/{i}"]).reshape(()))
    return None


def _base_name(name: str | None) -> str | None:
    """A model name without the `_<n>` Keras appends to make names unique in a session."""
    return None if name is None else re.sub(r"_\d+$", "", name)


def _model_summary(name: str | None, shapes: list[tuple]) -> str:
    count = sum(int(np.prod(shape)) for shape in shapes)
    named = f"{name!r} with " if name is not None else ""
    return f"{named}{count:,} values in {len(shapes)} variables"
