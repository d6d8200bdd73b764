"""`cvbench eval`: a checkpoint, a run folder or a `.keras` model over the whole validation
set, through `cvbench.tasks.evaluation.checkpoint_trainer` and the task's `evaluate`.

`--log-dir DIR` ends like a training run's folder: `DIR/results.json` (the metrics, the
checkpoint, model, recipe, precision) and for a detector `DIR/plots/per_class_ap.png`, then a
line saying what was written where.

`--log-dir` is never a training run's folder: one whose run lock a live `cvbench train`
holds (`run_dir.run_holder`: exit 1, as a second training into it), or that holds a run's
checkpoints, log, export or `results.json` (exit 2), both before anything is loaded.

`--json FILE` is checked before anything is loaded (`cvbench.utils.files.check_output`): it
is never the checkpoint, the model or the data it reads, nor a link, nor a training's
`results.json`; an existing FILE is replaced only when cvbench wrote it
(`written_by_cvbench`: an earlier `--json` of eval), and each results file written is
recorded for that. `-` and `/dev/stdout` are refused (`files.user_output`): the results are
printed on stdout already.

The results are printed (stdout) before either is written: a write that fails (a full disk
is found only then) ends with one line that says so (`results_printed_above`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from cvbench.cli.errors import CLIError
from cvbench.cli.task_args import (
    add_data_backend,
    add_model_and_data,
    print_results,
    report_corrupt,
    task_from_args,
)

#: What the line of a failed results write adds: the results are on stdout already.
RESULTS_PRINTED = "the results were printed above"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `eval` to the `cvbench` command."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate a checkpoint over the whole validation set (classifiers: top-1 and, "
        "over 5 classes, top-5 accuracy; SSD320: COCO box AP)",
        description=(
            "Evaluate --checkpoint (a checkpoint .npz, a run directory whose newest valid "
            "checkpoint is used, or an exported .keras model) on every validation image "
            "(classifiers: loss, top-1 and, for more than 5 classes, top-5 accuracy; SSD320: "
            "the 12 COCO box AP/AR "
            "numbers), "
            "with the recipe the checkpoint's run used (its model, image size and "
            "preprocessing; a .keras file: its model at its image size), else the model's "
            "recipe (or --recipe), as cvbench train resolves it."
        ),
    )
    add_model_and_data(p, synthetic_help="random data (smoke tests)")
    add_data_backend(p)
    p.add_argument("--checkpoint", required=True, help="checkpoint file, run directory or .keras")
    p.add_argument(
        "--json",
        default=None,
        help="also write the results to this JSON file (replacing only an earlier results file "
        "of cvbench, never an input)",
    )
    p.add_argument(
        "--log-dir",
        default=None,
        help="the evaluation's folder: results.json (the metrics, the checkpoint, model, "
        "recipe and precision) and, for SSD320, plots/per_class_ap.png (AP per class)",
    )
    p.set_defaults(func=eval_command, usage_error=p.error, kept_on_stop=_kept_on_stop)


def _kept_on_stop(args: argparse.Namespace) -> str:
    return "no results were written" if args.json or args.log_dir else "nothing was written"


def eval_command(args: argparse.Namespace) -> int:
    """Runs `cvbench eval`."""
    from cvbench.tasks.evaluation import checkpoint_trainer
    from cvbench.utils.model_file import refuse_serving_export

    checkpoint = Path(args.checkpoint)
    if not checkpoint.exists():
        raise CLIError(f"--checkpoint {args.checkpoint!r} does not exist")
    # predict's and export's rule: a serving export is told as one (exit 1), before the
    # flags a checkpoint would have stood for (--model) are asked for
    refuse_serving_export(checkpoint)
    checkpoint = newest_checkpoint(checkpoint)
    if args.json is not None:
        check_results_path(args, checkpoint)
    if args.log_dir is not None:
        check_results_folder(args, checkpoint)
    use_saved_run(args, checkpoint)
    task = task_from_args(args)
    if hasattr(task, "per_category"):
        task.per_category = True  # a detector's results: AP per class
    trainer = checkpoint_trainer(task, checkpoint, precision=args.precision, seed=args.seed)
    results = task.evaluate(trainer, batch_size=task.recipe.run.batch_per_gpu)
    print_results(trainer, results)
    skipped = report_corrupt(args, task, trainer.distribution)
    if trainer.is_chief and args.log_dir:
        refuse_training_folder(args.log_dir, evaluated=True)  # a training started meanwhile
    with results_printed_above():  # a full disk now loses no result
        if trainer.is_chief and args.json:
            from cvbench.utils.files import recording
            from cvbench.utils.io import write_json_atomic

            extra = {} if skipped is None else {"corrupt_records": skipped}
            with recording(args.json):
                write_json_atomic(args.json, {**results, **extra})
        if trainer.is_chief and args.log_dir:
            print(write_eval_results(args, task, trainer, checkpoint, results), flush=True)
    return 0


@contextlib.contextmanager
def results_printed_above() -> Iterator[None]:
    """The writes of `--json` and `--log-dir`, which come after the results are printed
    (`print_results`, on stdout): an `OSError` of theirs (a full disk, found only at the
    write) says so, `full/x.json: No space left on device; the results were printed above`,
    so that the user knows the evaluation itself is not lost."""
    try:
        yield
    except OSError as error:
        if error.errno is None:
            raise
        reason = f"{error.strerror or os.strerror(error.errno)}; {RESULTS_PRINTED}"
        raise type(error)(error.errno, reason, error.filename, None, error.filename2) from error


def check_results_folder(args: argparse.Namespace, checkpoint: Path) -> None:
    """Refuses, before anything is loaded, a `--log-dir` whose `results.json` would be an
    input, a link, or a file cvbench did not write, or whose `plots/` is a link.

    Raises:
        ValueError: naming the path (exit 2); a training run's folder (`refuse_training_folder`).
        BadFileError: `plots/` is a link or not a folder (exit 1).
        RunDirInUseError: a training run holds the folder (exit 1).
    """
    from cvbench.training.run_dir import RunFolder
    from cvbench.utils.files import check_output, owned_folder, written_by_cvbench

    folder = Path(args.log_dir)
    if not args.log_dir.strip():
        raise CLIError(
            "--log-dir is empty: name the evaluation's folder (--log-dir . for this one)"
        )
    refuse_training_folder(args.log_dir)
    inputs = [checkpoint, Path(args.checkpoint)]
    if args.data_dir is not None:
        inputs.append(Path(args.data_dir))
    check_output(RunFolder(folder).results, inputs=inputs, overwrite=True,
                 is_ours=written_by_cvbench, flag="--log-dir")  # fmt: skip
    owned_folder(folder, "plots", create=False)  # refuses a link


def refuse_training_folder(log_dir: str, *, evaluated: bool = False) -> None:
    """Refuses a `--log-dir` that is a training run's: one whose run lock a live process
    holds (`cvbench train` holds it from its start to its `results.json`), or that holds a
    run (checkpoints, `train_log.jsonl`, `export/`) or a training's `results.json`, which
    eval's would replace. Checked before anything is loaded, and again before the results
    are written (`evaluated=True`: a training started in the folder while eval ran; the
    message then says the results were printed above).

    Raises:
        RunDirInUseError: the lock is held, naming the holder (exit 1, as a second
            `cvbench train` into the folder).
        CLIError: a training run's folder (exit 2).
    """
    from cvbench.training.run_dir import (
        RunDirInUseError,
        RunFolder,
        existing_run,
        run_holder,
        training_results,
    )

    after = f" (a training started in it while eval ran); {RESULTS_PRINTED}" if evaluated else ""
    holder = run_holder(log_dir)
    if holder is not None:
        raise RunDirInUseError(
            f"{log_dir} is in use by a training run ({holder}); give eval another --log-dir" + after
        )
    if training_results(RunFolder(log_dir).results):
        why = f"its {RunFolder.RESULTS} is the training's"
    elif existing_run(log_dir):
        why = f"it holds {', '.join(existing_run(log_dir))}"
    else:
        return
    raise CLIError(
        f"{log_dir} is a training run's folder ({why}): give eval another --log-dir" + after
    )


def write_eval_results(args, task, trainer, checkpoint: Path, results: dict) -> str:
    """Writes the evaluation's folder (`--log-dir`): `plots/per_class_ap.png` for a
    detector with AP per class, then `results.json` (`metrics`, `checkpoint`, `model`,
    `recipe`, `task`, `precision`, `files`), atomically and recorded as cvbench's; returns
    the line saying what was written where."""
    from cvbench.demo.plots import plot_run
    from cvbench.tasks.runner import RESULTS_NAME, written_line
    from cvbench.utils.files import owned_folder, recording
    from cvbench.utils.io import write_json_atomic

    folder = Path(args.log_dir)
    plots = []
    if any(k.startswith("AP/") for k in results):
        plots = plot_run({}, results, owned_folder(folder, "plots"))
    record = {
        "metrics": {k: float(v) for k, v in results.items()},
        "checkpoint": str(checkpoint.resolve()),
        "model": task.options.model,
        "recipe": task.recipe.name,
        "task": task.recipe.task,
        "precision": trainer.precision,
        "files": {"plots": [Path(p).relative_to(folder).as_posix() for p in plots]},
    }
    owned_folder(folder)
    with recording(folder / RESULTS_NAME):
        write_json_atomic(folder / RESULTS_NAME, record)
    return written_line(folder, record)


def check_results_path(args: argparse.Namespace, checkpoint: Path) -> None:
    """Refuses, before anything is loaded, a `--json` that is (or holds) the checkpoint, the
    run folder or the data read (`check_json_path`).

    Raises:
        ValueError: naming the path (exit 2).
        OSError: a file where a folder is, a read-only folder (exit 1).
    """
    inputs = [checkpoint, Path(args.checkpoint)]
    if args.data_dir is not None:
        inputs.append(Path(args.data_dir))
    check_json_path(args.json, inputs=inputs, command="eval")


def check_json_path(path: str, *, inputs: list, command: str) -> None:
    """The one rule of a command's `--json` results file (eval, benchmark), checked before
    anything is loaded: not (or holding) one of `inputs`, not a link, not an existing file
    cvbench did not write, not a training's `results.json`; no file or read-only folder in
    its way.

    Raises:
        ValueError: naming the path (exit 2).
        OSError: a file where a folder is, a read-only folder (exit 1).
    """
    from cvbench.inference.outputs import check_parent_path, check_writable
    from cvbench.training.run_dir import training_results
    from cvbench.utils.files import check_output, written_by_cvbench

    check_output(path, inputs=inputs, overwrite=True, is_ours=written_by_cvbench, flag="--json")
    if training_results(path):
        raise CLIError(
            f"--json {path} is a training's results file; it is never replaced: give "
            f"{command} another --json"
        )
    # as predict's outputs: a file or a read-only folder in the way, found before the work
    check_parent_path(path)
    check_writable(path)


def newest_checkpoint(path: Path) -> Path:
    """A run or checkpoint folder's newest valid checkpoint file, found once (each reading
    after it, the run's settings and the weights, takes that file); a file as it is; a
    folder without a valid checkpoint as it is (loading it then says so)."""
    if not path.is_dir():
        return path
    from cvbench.training.checkpoint import find_checkpoint

    try:
        return find_checkpoint(path)
    except FileNotFoundError:
        return path


def use_saved_run(args: argparse.Namespace, checkpoint: Path) -> None:
    """Without --recipe: the model and the recipe (with the run's knobs: image size,
    preprocessing, classes, ...) that `checkpoint` records
    (`cvbench.tasks.evaluation.saved_run`). Its classes stand for --num-classes (records
    without `dataset_info.json` need one; with one, a model for other classes is a one-line
    error). A flag that contradicts what it records is checked (`check_saved_flags`): another
    --model is refused, another --image-size refused for a `.keras` model (its input is
    fixed) and, for a checkpoint, used with a warning naming both sizes."""
    from cvbench.tasks.evaluation import saved_run

    try:
        saved = saved_run(checkpoint)
    except (FileNotFoundError, ValueError):
        return  # not a readable checkpoint: the flags' errors first, then loading says why
    if not saved:
        return
    check_saved_flags(args, saved, checkpoint)
    if args.recipe is not None:
        return
    args.model, args.recipe = saved["model"], saved["recipe"]
    if args.num_classes is None:
        knobs = dict(saved["recipe"].knobs())
        args.num_classes = knobs.get("model.num_classes", knobs.get("detection.num_classes"))


def check_saved_flags(args: argparse.Namespace, saved: dict, checkpoint: Path) -> None:
    """Compares --model and --image-size with what `checkpoint` records of its run.

    Raises:
        CLIError: another --model (naming both), or another --image-size for a `.keras`
            model, whose input size is fixed (exit 2).
    """
    from cvbench.tasks.recipes.resolve import setting_knob

    if args.model is not None and args.model != saved["model"]:
        raise CLIError(
            f"--model {args.model}: {checkpoint} holds a {saved['model']} model; drop --model "
            "(eval takes the model from the checkpoint)"
        )
    recipe = saved["recipe"]
    knob = setting_knob(recipe, "image_size")
    size = None if knob is None else recipe.value(knob)
    if args.image_size is None or size is None or args.image_size == size:
        return
    if checkpoint.suffix == ".keras":
        raise CLIError(
            f"--image-size {args.image_size}: the model in {checkpoint} takes {size}x{size} "
            "images; drop --image-size"
        )
    print(
        f"cvbench eval: warning: evaluating at --image-size {args.image_size}, not at {size}, "
        f"the image size the run of {checkpoint} trained at",
        file=sys.stderr,
        flush=True,
    )
