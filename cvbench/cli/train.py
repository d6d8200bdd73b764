"""`cvbench train` (and, registered with it, `cvbench eval`): thin commands over the Trainer.

The command parses its flags into the task (`task_from_args`: the model's recipe, or
`--recipe`, with every knob flag resolved into it as a deviation naming the flag), then runs
`cvbench.tasks.prepare_run` and `TaskRun.fit`. Under `horovodrun` every rank runs the
command; only rank 0 prints. On the JAX backend (`--backend jax` or `KERAS_BACKEND=jax`) it
trains on every local device (`--devices N`: the first N), and with the `KERAS_DISTRIBUTION_*`
variables set, one command per process (`cvbench.cli.backend_args`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cvbench.cli.args import non_negative_int, positive_int
from cvbench.cli.backend_args import add_backend_flags, distribution_from_args
from cvbench.cli.errors import CLIError
from cvbench.cli.evaluate import register as register_eval
from cvbench.cli.recipe_args import add_recipe_flags
from cvbench.cli.task_args import (
    add_data_backend,
    add_model_and_data,
    print_results,
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
            "Train --model on ImageNet TFRecords (--data-dir) or synthetic data with its "
            "recipe (cvbench recipes: NVIDIA's for ResNet-50, Inception V3 and SSD320, "
            "cvbench's defaults for the other ResNets) or --recipe; every flag that names a "
            "knob overrides it. Under horovodrun every rank runs this command; rank 0 prints, "
            "logs and writes checkpoints under --log-dir."
        ),
    )
    add_model_and_data(p, synthetic_help="random data (throughput runs, smoke tests)")
    add_data_backend(p)
    p.add_argument(
        "--steps-per-epoch",
        type=positive_int,
        default=None,
        help="steps per epoch (default: the training set over the global batch; 100 for "
        "synthetic data)",
    )
    add_recipe_flags(p)
    _add_run_folder_flags(p)
    _add_run_flags(p)
    _add_eval_flags(p)
    p.add_argument("--no-export", action="store_true", help="do not export the model at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_backend_flags(p)

    p.set_defaults(func=train_command, usage_error=p.error, kept_on_stop=kept_on_stop)
    register_eval(subparsers)


def _add_run_folder_flags(p: argparse.ArgumentParser) -> None:
    """--log-dir and its checkpoints: how often, how many, resuming from them."""
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


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    """How the run logs, measures and computes: --log-every, --burn-in, --deterministic,
    --compression."""
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


def _add_eval_flags(p: argparse.ArgumentParser) -> None:
    """When the run evaluates: --eval, or --eval-count times."""
    p.add_argument(
        "--eval",
        choices=("end", "epoch", "none"),
        default="end",
        help="evaluate on the validation set (classifiers: top-1 and, for more than 5 classes, "
        "top-5 accuracy; SSD320: COCO box AP) at the end (default), after every epoch, or never",
    )
    p.add_argument(
        "--eval-count",
        type=positive_int,
        default=None,
        help="evaluate N times, evenly over the run (the last at its end), with the results "
        "(COCO AP for SSD320) in the epoch logs, train_log.jsonl and TensorBoard; replaces --eval",
    )


def kept_on_stop(args: argparse.Namespace) -> str:
    """What `cvbench train` keeps when a signal stops it outside training's own graceful stop
    (building the model, the final evaluation or export): its checkpoints; a half-written
    export is removed (`cvbench.cli.StopSignalReceived`).

    Example:
        >>> kept_on_stop(argparse.Namespace(log_dir="run"))  # doctest: +ELLIPSIS
        'the checkpoints in run/checkpoints are kept (rerun with --resume to continue); ...'
    """
    if args.log_dir is None:
        return "nothing was saved (no --log-dir)"
    checkpoints = f"{args.log_dir.rstrip('/')}/checkpoints"
    return (
        f"the checkpoints in {checkpoints} are kept (rerun with --resume to continue); "
        "nothing is left half-written"
    )


def train_command(args: argparse.Namespace) -> int:
    """Runs `cvbench train`."""
    if args.force_resume and not args.resume:
        raise CLIError("--force-resume needs --resume")
    if args.eval_count is not None and args.eval != "end":
        raise CLIError(f"--eval-count replaces --eval; drop --eval {args.eval}")
    if args.log_dir is not None and not args.log_dir.strip():
        # Path("") is the current folder: an empty value is a mistake, not a choice of ".".
        raise CLIError("--log-dir is empty: name the run folder (--log-dir . for this one)")
    # First: --backend must be set before Keras starts, jax.distributed before JAX runs.
    distribution = distribution_from_args(args)
    from cvbench.tasks import prepare_run
    from cvbench.training import TrainConfig

    task = task_from_args(args, synthetic_steps=args.steps_per_epoch or 100)
    check_evaluation_split(args, task)
    fresh = args.resume and args.log_dir is not None and starts_a_new_run(args.log_dir)
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
    )
    run = prepare_run(
        task,
        precision=args.precision,
        config=config,
        seed=args.seed,
        steps_per_epoch=args.steps_per_epoch,
        distribution=distribution,
    )
    run.final_per_class = True  # a detector's last evaluation: AP per class (results, plots)
    if args.log_dir is None and run.trainer.is_chief:
        print(NO_LOG_DIR, file=sys.stderr, flush=True)
    if fresh and run.trainer.is_chief:  # requeue scripts pass --resume from the first run on
        print(nothing_to_resume(args.log_dir), file=sys.stderr, flush=True)
    with run.holding_log_dir():  # from the start to results.json: no eval writes there
        # The recipe's run (--epochs and --steps-per-epoch are its knobs, planned by
        # prepare_run): exactly its planned steps.
        results = run.fit(evaluate=args.eval, eval_count=args.eval_count)
        if results is not None:
            print_results(run.trainer, results)
        report_corrupt(args, task, run.trainer.distribution, log_dir=args.log_dir)
        if args.log_dir is not None and run.trainer.is_chief:
            print(write_run_results(run, results), flush=True)
    return 0


def check_evaluation_split(args: argparse.Namespace, task) -> None:
    """Refuses, before the first step, a run that evaluates (`--eval end` or `epoch`,
    `--eval-count`) on records without the split the task evaluates on: found only when
    evaluating, the whole run was trained before exit 2. A damaged split (missing shards, a
    0-byte shard) is named now too (`list_split_files`).

    Raises:
        CLIError: naming the folder, what the listing found and `--eval none` (exit 2).
    """
    if args.data_dir is None or args.eval == "none":
        return
    split = getattr(task, "evaluation_split", None)
    if split is None:
        return
    try:
        task.check_evaluation_split()
    except FileNotFoundError as error:
        when, drop = f"--eval {args.eval}", ""
        if args.eval_count is not None:
            when, drop = f"--eval-count {args.eval_count}", " without --eval-count"
        raise CLIError(
            f"{args.data_dir} has no {split} split to evaluate on ({error}): {when} evaluates "
            f"on it; pass --eval none{drop} to train without evaluating"
        ) from None


def starts_a_new_run(log_dir: str) -> bool:
    """Whether `--resume` in the run folder `log_dir` starts a new run: it holds no
    checkpoint file (a valid one is resumed; a resume from invalid ones is refused,
    `resume.check_resumed`), and it and its `checkpoints` are folders or absent (anything
    else there is refused with the run's own line, and no run starts)."""
    from cvbench.training.checkpoint import CheckpointManager
    from cvbench.training.run_dir import RunFolder

    folder = RunFolder(log_dir)
    for path in (Path(log_dir), Path(folder.checkpoints)):
        if os.path.lexists(path) and not path.is_dir():
            return False
    return not CheckpointManager(folder.checkpoints).checkpoints()


def nothing_to_resume(log_dir: str) -> str:
    """The warning of `--resume` into a folder without a checkpoint (a typo, or the first
    run of a requeued job): the run starts from step 0, as without --resume.

    Example:
        >>> nothing_to_resume("runs/a")
        'cvbench train: warning: --resume: runs/a holds no checkpoint; starting a new run'
    """
    return f"cvbench train: warning: --resume: {log_dir} holds no checkpoint; starting a new run"


def write_run_results(run, results: dict[str, float] | None) -> str:
    """Ends the run folder (rank 0): the plots of the run in `plots/`
    (`cvbench.demo.plots.plot_run`: `training.png`, and `per_class_ap.png` for a detector),
    then `results.json`, the final metrics in `train_log.jsonl` and TensorBoard
    (`TaskRun.write_results`); returns the line saying what was written where."""
    from cvbench.demo.plots import plot_run
    from cvbench.tasks.runner import written_line
    from cvbench.utils.files import owned_folder

    log_dir = run.trainer.log_dir
    folder = owned_folder(log_dir, "plots")  # never a link
    title = f"{run.task.options.model} ({run.task.recipe.name})"
    plots = plot_run(run.epoch_history(), results or {}, folder, title=title)
    record = run.write_results(results, plots=plots)
    return written_line(log_dir, record)
