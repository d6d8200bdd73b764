"""`cvbench train` and `cvbench eval`: thin commands over the Trainer.

Each command makes the task of `--model` (`cvbench.tasks.make_task`), builds the `Trainer`
and the data through `cvbench.tasks.prepare_run` with the flags, and runs it. Under
`horovodrun` every rank runs the command; only rank 0 prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cvbench.cli.args import float_list, non_negative_float, non_negative_int, positive_int
from cvbench.cli.errors import CLIError
from cvbench.cli.task_args import (
    add_data_backend,
    add_model_and_data,
    data_backend_kwargs,
    report_corrupt,
    task_from_args,
)

#: What `cvbench train` without `--log-dir` says first (rank 0, on stderr).
NO_LOG_DIR = (
    "cvbench train: no --log-dir: nothing will be saved (no checkpoints, no export); pass "
    "--log-dir DIR to keep the run"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `train` and `eval` to the `cvbench` command."""
    p = subparsers.add_parser(
        "train",
        help="train a model (Horovod-aware, mixed precision, checkpoints, resume)",
        description=(
            "Train --model on ImageNet TFRecords (--data-dir) or synthetic data, with the "
            "task's reference recipe (ResNet: NVIDIA v1.5 SGD + cosine; Inception V3: LARC + "
            "polynomial) unless flags override it. Under horovodrun every rank runs this "
            "command; rank 0 prints, logs and writes checkpoints under --log-dir."
        ),
    )
    add_model_and_data(p, synthetic_help="random data (throughput runs, smoke tests)", recipes=True)
    add_data_backend(p)
    p.add_argument(
        "--recipe",
        default=None,
        help="named recipe: resnet50_v1.5_90e, resnet50_v1.5_250e, inception_v3_nvcnn, "
        "ssd320_v1.2 (cvbench recipes lists them; default: the model's reference recipe, "
        "e.g. resnet50_v1.5_90e for resnet50; models without one use the task's defaults). "
        "Every flag below that names a knob overrides it; the run log records the result",
    )
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=None,
        help="epochs to train (default: the recipe's: 90 for ResNet-50, SSD320 its 12,500 "
        "steps at 8 x 32 scaled to the global batch; 90 without a recipe)",
    )
    p.add_argument(
        "--steps-per-epoch",
        type=positive_int,
        default=None,
        help="steps per epoch (default: the training set over the global batch; 100 for "
        "synthetic data)",
    )
    p.add_argument(
        "--lr",
        type=non_negative_float,
        default=None,
        help="base learning rate at the recipe's reference batch (256 images), scaled "
        "linearly to the global batch",
    )
    p.add_argument("--optimizer", choices=("sgd", "lars"), default=None, help="update rule")
    p.add_argument("--momentum", type=non_negative_float, default=None, help="momentum")
    p.add_argument(
        "--nesterov", action=argparse.BooleanOptionalAction, default=None, help="Nesterov momentum"
    )
    p.add_argument(
        "--weight-decay",
        type=non_negative_float,
        default=None,
        help="L2 weight decay (SSD: the L2 weight of its kernel regularizers)",
    )
    p.add_argument(
        "--label-smoothing", type=non_negative_float, default=None, help="label smoothing"
    )
    p.add_argument(
        "--warmup-epochs", type=non_negative_float, default=None, help="linear warmup epochs"
    )
    p.add_argument(
        "--schedule",
        choices=("cosine", "polynomial", "step", "constant"),
        default=None,
        help="decay after the warmup",
    )
    p.add_argument("--power", type=non_negative_float, default=None, help="polynomial power")
    p.add_argument(
        "--boundaries", type=float_list, default=None, help="step-decay epochs, e.g. 30,60,80"
    )
    p.add_argument(
        "--decay-from",
        choices=("warmup_end", "start"),
        default=None,
        help="where the decay's progress counts from: after the warmup, or step 0 over all "
        "steps (DLE's cosine)",
    )
    p.add_argument("--mixup", type=non_negative_float, default=None, help="mixup alpha (0: off)")
    p.add_argument(
        "--loss-scale",
        type=non_negative_float,
        default=None,
        help="fp16 loss scale: the static value, or the initial dynamic one",
    )
    p.add_argument(
        "--dynamic-loss-scale",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="dynamic fp16 loss scaling (--no-dynamic-loss-scale: static --loss-scale)",
    )
    p.add_argument(
        "--weights",
        default=None,
        help="classifier weights to start from: a weight file, or imagenet",
    )
    p.add_argument(
        "--backbone-weights",
        default=None,
        help="SSD backbone weights: a keras.applications ResNet-50 _notop file, or imagenet "
        "(required: the SSD recipe freezes every batch norm)",
    )
    p.add_argument(
        "--log-dir", default=None, help="checkpoints, logs, TensorBoard and export go here"
    )
    p.add_argument(
        "--checkpoint-every",
        type=non_negative_int,
        default=0,
        help="also checkpoint every N steps (0: only at epoch ends)",
    )
    p.add_argument("--keep-checkpoints", type=positive_int, default=3, help="checkpoints kept (3)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest valid checkpoint in --log-dir; one written for another "
        "plan (epochs, steps per epoch, batch, precision, model) is refused, saying what differs",
    )
    p.add_argument(
        "--force-resume",
        action="store_true",
        help="with --resume: resume from such a checkpoint anyway (a warning names the "
        "differences)",
    )
    p.add_argument(
        "--log-every", type=non_negative_int, default=100, help="print a line every N steps"
    )
    p.add_argument(
        "--burn-in", type=non_negative_int, default=20, help="steps left out of Images/sec"
    )
    p.add_argument(
        "--deterministic", action="store_true", help="deterministic ops (bit-exact resumes)"
    )
    p.add_argument(
        "--compression",
        choices=("none", "fp16"),
        default="none",
        help="Horovod gradient compression (fp16 needs --precision fp16)",
    )
    p.add_argument(
        "--eval",
        choices=("end", "epoch", "none"),
        default="end",
        help="evaluate top-1/top-5 at the end (default), after every epoch, or never",
    )
    p.add_argument("--no-export", action="store_true", help="do not export the model at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=train_command, usage_error=p.error)

    p = subparsers.add_parser(
        "eval",
        help="evaluate a checkpoint over the whole validation set (top-1, top-5)",
        description=(
            "Evaluate --checkpoint (a checkpoint .npz, a run directory whose newest valid "
            "checkpoint is used, or an exported .keras model) on every validation image."
        ),
    )
    add_model_and_data(p, synthetic_help="random data (smoke tests)")
    add_data_backend(p)
    p.add_argument("--checkpoint", required=True, help="checkpoint file, run directory or .keras")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.set_defaults(func=eval_command)


def _overrides(args: argparse.Namespace, names: dict[str, str]) -> dict:
    chosen = {field: getattr(args, flag) for flag, field in names.items()}
    return {field: value for field, value in chosen.items() if value is not None}


# Flag (its `args` attribute) -> the knob it sets: (classification knob, detection knob);
# None where the flag has no knob in that kind of recipe.
FLAG_KNOBS: dict[str, tuple[str | None, str | None]] = {
    "batch_size": ("run.batch_per_gpu", "run.batch_per_gpu"),
    "epochs": ("run.epochs", "run.epochs"),
    "precision": ("run.precision", "run.precision"),
    "lr": ("schedule.base_lr", "schedule.base_lr"),
    "warmup_epochs": ("schedule.warmup_epochs", "schedule.warmup_epochs"),
    "schedule": ("schedule.decay", "schedule.decay"),
    "power": ("schedule.power", "schedule.power"),
    "decay_from": ("schedule.decay_from", "schedule.decay_from"),
    "optimizer": ("optimizer.name", "optimizer.name"),
    "momentum": ("optimizer.momentum", "optimizer.momentum"),
    "nesterov": ("optimizer.nesterov", "optimizer.nesterov"),
    "weight_decay": ("optimizer.weight_decay", "detection.l2_weight"),
    "label_smoothing": ("loss.label_smoothing", "loss.label_smoothing"),
    "mixup": ("loss.mixup_alpha", None),
    "loss_scale": ("loss.loss_scale", "loss.loss_scale"),
    "dynamic_loss_scale": ("loss.dynamic_loss_scale", "loss.dynamic_loss_scale"),
    "image_size": ("preprocessing.image_size", "detection.image_size"),
    "num_classes": ("model.num_classes", "detection.num_classes"),
    "weights": ("model.weights", None),
    "backbone_weights": (None, "detection.backbone_weights"),
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def resolve_recipe(args: argparse.Namespace):
    """The recipe of the run: `--recipe` (or the model's reference recipe) with every flag
    given set on its knob (`FLAG_KNOBS`, each a `Deviation` with the flag as the reason).
    Sets `args.model` from the recipe when `--model` is omitted.

    Returns:
        The resolved `Recipe`, or None for a model without a recipe.

    Raises:
        CLIError: no --model and no --recipe; a recipe for another model; a flag without a
            knob in the recipe; an SSD with frozen batch norms and no --backbone-weights.
    """
    from cvbench.tasks.recipes import default_recipe, get_recipe

    if args.recipe is not None:
        try:
            recipe = get_recipe(args.recipe)
        except ValueError as err:
            raise CLIError(f"--recipe: {err}") from None
        if args.model is None:
            args.model = recipe.model
        elif args.model != recipe.model:
            raise CLIError(
                f"--recipe {args.recipe} trains {recipe.model}, not --model {args.model}"
            )
    elif args.model is None:
        message = "the following arguments are required: --model (or --recipe)"
        usage_error = getattr(args, "usage_error", None)
        if usage_error is not None:
            usage_error(message)  # exits 2 with the usage, as argparse's own errors
        raise CLIError(message)
    else:
        recipe = default_recipe(args.model)
    if recipe is None:
        return None
    detection = recipe.task == "detection"
    for name, knobs in FLAG_KNOBS.items():
        value = getattr(args, name)
        if name == "precision" and value == "auto":
            value = None  # "auto" is fp16 on a GPU: the recipes' AMP
        if name == "backbone_weights" and detection:
            value = value or None  # from the flag only, so nothing downloads unasked
        elif value is None:
            continue
        knob = knobs[1] if detection else knobs[0]
        if knob is None:
            raise CLIError(f"{_flag(name)} sets no knob of recipe {recipe.name}")
        changes = {knob: value}
        if name == "epochs" and recipe.run.images is not None:
            changes["run.images"] = None  # counted in epochs now
        reason = _flag(name) if getattr(args, name) is not None else f"no {_flag(name)}"
        recipe = recipe.override(changes, reason=reason)
    if (
        detection
        and recipe.detection.freeze_batchnorm
        and recipe.detection.backbone_weights is None
    ):
        from cvbench.tasks.detection import frozen_backbone_message

        raise CLIError(frozen_backbone_message(recipe.model))
    return recipe


def _fit_classes(task, recipe, args: argparse.Namespace):
    """`recipe` with the classes the task's data has (its `dataset_info.json`) where they
    differ from the recipe's; label smoothing then spreads over the model's classes."""
    if recipe is None:
        return recipe
    knob = "detection.num_classes" if recipe.task == "detection" else "model.num_classes"
    if task.num_classes == recipe.value(knob):
        return recipe
    changes = {knob: task.num_classes}
    if recipe.task != "detection" and recipe.loss.smoothing_classes is not None:
        changes["loss.smoothing_classes"] = None
    return recipe.override(changes, reason="the classes of --data-dir (dataset_info.json)")


def train_command(args: argparse.Namespace) -> int:
    """Runs `cvbench train`."""
    import dataclasses

    from cvbench.tasks import prepare_run
    from cvbench.training import TrainConfig

    if args.force_resume and not args.resume:
        raise CLIError("--force-resume needs --resume")
    recipe = resolve_recipe(args)
    task_kwargs = {}
    if recipe is None:
        if args.mixup:
            raise CLIError(f"--mixup needs a model with a recipe; {args.model} has none")
        if args.backbone_weights is not None:
            raise CLIError(f"--backbone-weights is for SSD models, not {args.model}")
        if args.weights is not None:
            task_kwargs["weights"] = args.weights
    elif recipe.task == "detection":
        task_kwargs["backbone_weights"] = recipe.detection.backbone_weights
    task_kwargs.update(
        data_backend_kwargs(args, task=recipe.task if recipe is not None else _task_of(args.model))
    )
    task = task_from_args(
        args,
        synthetic_steps=args.steps_per_epoch or 100,
        label_smoothing=args.label_smoothing if recipe is None else None,
        recipe=recipe,
        **task_kwargs,
    )
    fitted = _fit_classes(task, recipe, args)
    if fitted is not recipe:
        task = type(task)(dataclasses.replace(task.options, recipe=fitted), **task_kwargs)
    config = TrainConfig(
        log_dir=args.log_dir,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
        resume=args.resume,
        force_resume=args.force_resume,
        log_every=args.log_every,
        burn_in_steps=args.burn_in,
        progress_bar=False if args.no_progress else "auto",
        seed=args.seed,
        deterministic=args.deterministic,
        compression=args.compression,
        export=not args.no_export,
        **_overrides(
            args, {"loss_scale": "loss_scale", "dynamic_loss_scale": "dynamic_loss_scale"}
        ),
    )
    if recipe is not None:
        boundaries = _overrides(args, {"boundaries": "boundaries_epochs"})
        run = prepare_run(
            task,
            schedule_changes=boundaries,
            precision=args.precision,
            config=config,
            seed=args.seed,
            steps_per_epoch=args.steps_per_epoch,
        )
        epochs = None  # the recipe's run (--epochs is its knob)
    else:
        run = _prepare_without_recipe(task, args, config)
        epochs = args.epochs or 90
    if args.log_dir is None and run.trainer.is_chief:
        print(NO_LOG_DIR, file=sys.stderr, flush=True)
    results = run.fit(epochs=epochs, steps_per_epoch=args.steps_per_epoch, evaluate=args.eval)
    if results is not None:
        _report(run.trainer, results)
    report_corrupt(args, task, run.trainer.distribution, log_dir=args.log_dir)
    return 0


def _prepare_without_recipe(task, args: argparse.Namespace, config):
    """`prepare_run` for a model without a recipe: the task's defaults, flags replacing
    their fields."""
    from cvbench.tasks import prepare_run

    optimizer, schedule = task.recipe()
    optimizer = optimizer.replace(
        **_overrides(
            args,
            {
                "optimizer": "name",
                "momentum": "momentum",
                "nesterov": "nesterov",
                "weight_decay": "weight_decay",
            },
        )
    )
    schedule = schedule.replace(
        **_overrides(
            args,
            {
                "lr": "base_lr",
                "warmup_epochs": "warmup_epochs",
                "schedule": "decay",
                "power": "power",
                "boundaries": "boundaries_epochs",
                "decay_from": "decay_from",
            },
        )
    )
    return prepare_run(
        task,
        batch_size=args.batch_size or 256,
        optimizer=optimizer,
        schedule=schedule,
        precision=args.precision,
        config=config,
        seed=args.seed,
    )


def _task_of(model: str | None) -> str | None:
    """The task of a model name ("classification", "detection"), or None if unknown."""
    from cvbench.zoo import CLASSIFICATION, list_models

    return CLASSIFICATION if model in list_models(task=CLASSIFICATION) else None


def eval_command(args: argparse.Namespace) -> int:
    """Runs `cvbench eval`."""
    from cvbench.tasks import build_trainer
    from cvbench.training import TrainConfig
    from cvbench.training.checkpoint import find_checkpoint

    task = task_from_args(args, **data_backend_kwargs(args, task=_task_of(args.model)))
    checkpoint = Path(args.checkpoint)
    if not checkpoint.exists():
        raise CLIError(f"--checkpoint {args.checkpoint!r} does not exist")
    config = TrainConfig(progress_bar=False, log_every=0, seed=args.seed)
    model, precision = None, args.precision
    if checkpoint.suffix == ".keras":
        model = _evaluation_model(checkpoint, task)
        _check_classes(_output_classes(model), task, checkpoint)
        precision = _policy_of(model)
    trainer = build_trainer(task, precision=precision, config=config, model=model)
    if model is None:
        _load_weights(trainer, find_checkpoint(checkpoint), task)
    results = task.evaluate(trainer, batch_size=args.batch_size)
    _report(trainer, results)
    skipped = report_corrupt(args, task, trainer.distribution)
    if trainer.is_chief and args.json:
        from cvbench.utils.io import write_json_atomic

        extra = {} if skipped is None else {"corrupt_records": skipped}
        write_json_atomic(args.json, {**results, **extra})
    return 0


def _evaluation_model(path: Path, task):
    """The `.keras` model at `path` as the task's evaluation data needs it.

    A file with a `ModelInfo` (what cvbench writes for users) takes `[0, 255]` RGB, while
    the classification pipeline hands out normalized images (`task.input_normalization()`):
    those are mapped back to `[0, 255]` in front of the model (`x * std + mean`). Detection
    data is `[0, 255]` already; a file without `ModelInfo` (older exports) is used as it is.
    """
    import keras

    from cvbench.utils.model_file import load_model, read_model_info
    from cvbench.utils.plain_keras import with_input_normalization

    try:
        info = read_model_info(path)
    except ValueError as err:
        raise CLIError(str(err)) from None
    if info is None:
        return keras.saving.load_model(path, compile=False)
    if info.task != task.name:
        raise CLIError(f"--checkpoint {str(path)!r} is a {info.task} model, not {task.name}")
    model, _ = load_model(path)
    if info.task != "classification":
        return model
    means, stds = task.input_normalization()
    return with_input_normalization(
        model,
        mean=[-m / s for m, s in zip(means, stds, strict=True)],
        std=[1 / s for s in stds],
        name="denormalize",
    )


def _policy_of(model) -> str:
    name = model.dtype_policy.name
    return name if name in ("mixed_float16", "mixed_bfloat16") else "float32"


def _report(trainer, results: dict[str, float]) -> None:
    if trainer.is_chief:
        for name, value in results.items():
            print(f"{name}: {value:.6g}", flush=True)


def _output_classes(model) -> int | None:
    """The classes a classifier (logits `(B, C)`) or an SSD (`{"classes": (B, N, C)}`)
    predicts, or None for another kind of output."""
    output = model.output
    if isinstance(output, dict):
        output = output.get("classes")
    shape = getattr(output, "shape", None)
    return shape[-1] if shape else None


def _check_classes(model_classes: int | None, task, source: Path) -> None:
    """A one-line error when the model in `source` predicts another number of classes than
    the task's data has (instead of a shape error or a silently wrong evaluation)."""
    if model_classes is None or model_classes == task.num_classes:
        return
    if task.class_names is not None:
        data = f"the data in {task.options.data_dir} has {task.num_classes} (its dataset_info.json)"
        hint = "evaluate it on the data it was trained on"
    else:
        data = f"the task has {task.num_classes}"
        hint = f"pass --num-classes {model_classes}"
    raise CLIError(f"{source} holds a model for {model_classes} classes but {data}; {hint}")


def _load_weights(trainer, path: Path, task) -> None:
    """`trainer.load_weights(path)`; a checkpoint of a model for another number of classes
    is a one-line error saying so (`_check_classes`), not a shape message."""
    try:
        trainer.load_weights(path)
    except ValueError:
        from cvbench.training.checkpoint import load_checkpoint

        stored = [info["shape"] for info in load_checkpoint(path)[0]["model"]]
        for shape, variable in zip(stored, trainer.model.variables, strict=False):
            mine = list(variable.shape)
            if shape != mine and len(shape) == len(mine) and shape[:-1] == mine[:-1]:
                per_class, rest = divmod(mine[-1], task.num_classes)  # SSD: anchors x classes
                if rest == 0 and per_class and shape[-1] % per_class == 0:
                    _check_classes(shape[-1] // per_class, task, path)
                break
        raise
