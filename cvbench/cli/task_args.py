"""The flags `cvbench train`, `eval` and `benchmark` share (model, data, batch, precision,
corrupt data), the task they select (`cvbench.tasks.make_task`), and the report of the
corrupt records `--skip-corrupt` skipped."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cvbench.cli.args import positive_int, seed_int
from cvbench.cli.errors import CLIError
from cvbench.data.image_io import DEFAULT_MAX_PIXELS

_PRECISIONS = ("auto", "fp16", "bf16", "fp32")
#: Each data flag (of `add_data_backend`, and `--max-pixels`) and the readers (--data-backend
#: values) it applies to: given with another reader, or with --synthetic data (no reader), it
#: would have no effect, so it is refused (exit 2) naming the flag and these readers. The
#: reader is the one the run uses: --data-backend, or by default tf (grain on JAX without
#: TensorFlow).
DATA_FLAGS = {
    "--data-workers": ("grain",),  # grain's worker processes (tf.data and DALI: threads)
    "--dali-device": ("dali",),  # where DALI decodes
    "--max-pixels": ("tf", "grain"),  # the header bound of records (DALI decodes unbounded)
}
#: What each reader is called in a refusal.
_READER_NAMES = {"tf": "tf.data", "grain": "grain", "dali": "DALI", None: "--synthetic data"}


def add_model_and_data(p: argparse.ArgumentParser, *, synthetic_help: str) -> None:
    """Adds --model, --recipe, --data-dir | --synthetic, --batch-size, --image-size,
    --num-classes, --precision, --seed and --skip-corrupt to `p` (`cvbench train`, `eval` and
    `benchmark` resolve the model's recipe the same way: `task_from_args`)."""
    p.add_argument(
        "--model",
        default=None,
        help="model name, e.g. resnet50, inception_v3, ssd320 (default: the model of --recipe)",
    )
    p.add_argument(
        "--recipe",
        default=None,
        help="named recipe: resnet50_v1.5_90e, resnet50_v1.5_250e, inception_v3_nvcnn, "
        "ssd320_v1.2, and cvbench's defaults resnet18_cvbench, resnet34_cvbench, "
        "resnet101_cvbench, resnet152_cvbench (cvbench recipes lists them; default: the "
        "model's, e.g. resnet50_v1.5_90e for resnet50). Every flag that names a knob "
        "overrides it; the run log records the result",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data-dir", help="directory of ImageNet-format TFRecords (train-*, validation-*)"
    )
    source.add_argument("--synthetic", action="store_true", help=synthetic_help)
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="images per rank and step (default: the recipe's, e.g. 256 for ResNet-50, 128 "
        "for Inception V3, 32 for SSD320)",
    )
    p.add_argument(
        "--image-size", type=positive_int, default=None, help="input size (the recipe's)"
    )
    p.add_argument(
        "--num-classes",
        type=positive_int,
        default=None,
        help="classes the model predicts (default: the classes in --data-dir's "
        "dataset_info.json, which cvbench build-imagenet and build-coco write; a different "
        "number is an error; records without that file need --num-classes; --synthetic: the "
        "recipe's, 1000 for classifiers, 90 for SSD)",
    )
    p.add_argument(
        "--precision",
        choices=_PRECISIONS,
        default="auto",
        help="fp16 (mixed float16, dynamic loss scaling), bf16 (mixed bfloat16), fp32, or "
        "auto: fp16 on a GPU, bf16 on a CPU with native bfloat16 (AVX512-BF16 or AMX), fp32 "
        "on other CPUs (default auto)",
    )
    p.add_argument("--seed", type=seed_int, default=None, help="random seed (default: none)")
    p.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip corrupt records and undecodable images of --data-dir (each named on "
        "stderr, the total printed at the end) instead of stopping with an error naming the "
        "file and record",
    )
    p.add_argument(
        "--max-pixels",
        type=positive_int,
        default=None,  # None: not given (refused where it has no effect: DATA_FLAGS)
        help="a record's image with more pixels than this (width x height, read from its "
        "header before decoding) is a corrupt record, as the builders' --max-pixels "
        f"(default {DEFAULT_MAX_PIXELS:,}: 64 megapixels); --data-dir records read by tf.data "
        "or grain only: refused with --synthetic data and --data-backend dali",
    )


def task_from_args(args: argparse.Namespace, *, synthetic_steps: int = 100):
    """The task `args` select: `--model` / `--recipe` with every knob flag given resolved
    into the recipe (`TaskOptions(settings=..., reasons=...)`), `--data-dir` (a folder: a
    one-line error if not) and, where the command has them, --data-backend / --dali-device.

    Raises:
        CLIError: neither --model nor --recipe; --data-dir not a folder.
    """
    from cvbench.cli.recipe_args import recipe_settings
    from cvbench.tasks import TaskOptions, make_task

    if args.model is None and args.recipe is None:
        message = "the following arguments are required: --model (or --recipe)"
        usage_error = getattr(args, "usage_error", None)
        if usage_error is not None:
            usage_error(message)  # exits 2 with the usage, as argparse's own errors
        raise CLIError(message)
    if args.data_dir is None:  # --synthetic data: no reader for a data flag to apply to
        check_data_flags(args, None)
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise CLIError(f"--data-dir {args.data_dir!r} is not a directory")
    settings, reasons = recipe_settings(args)
    for name in ("image_size", "num_classes"):
        settings.pop(name)
    options = TaskOptions(
        model=args.model,
        recipe=args.recipe,
        data_dir=args.data_dir,
        image_size=args.image_size,
        num_classes=args.num_classes,
        synthetic_steps=synthetic_steps,
        skip_corrupt=args.skip_corrupt,
        max_pixels=DEFAULT_MAX_PIXELS if args.max_pixels is None else args.max_pixels,
        settings=settings,
        reasons=reasons,
        reader=record_reader_of(args),
        data_workers=getattr(args, "data_workers", None) or 0,
    )
    task_kwargs = {}
    if hasattr(args, "data_backend"):
        task_kwargs = data_backend_kwargs(args, task=options.recipe.task)
    task = make_task(options, **task_kwargs)
    if hasattr(args, "data_backend") and args.data_backend is None:
        # The default reader is known once the task is: tf, or grain on JAX without TF.
        check_data_flags(args, task.reader() if args.data_dir is not None else None)
    return task


def check_data_flags(args: argparse.Namespace, reader: str | None) -> None:
    """Refuses a data flag (`DATA_FLAGS`) given where it has no effect: with a `reader`
    ("tf", "grain", "dali"; None for --synthetic data) it does not apply to.

    Raises:
        CLIError: naming the flag and the readers it applies to (exit 2).
    """
    for flag, readers in DATA_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_"), None) is None or reader in readers:
            continue
        used = _READER_NAMES[reader]
        if reader is not None and args.data_backend is None:
            used += " (the default reader)"
        raise CLIError(
            f"{flag} needs --data-backend {' or '.join(readers)}: it has no effect with {used}"
        )


def report_corrupt(
    args: argparse.Namespace, task: Any, distribution: Any, *, log_dir: str | None = None
) -> int | None:
    """With `--skip-corrupt`: the corrupt records every rank's pipelines skipped (a
    collective: every rank calls it), printed by rank 0 as `cvbench: skipped N corrupt
    records` and recorded in `log_dir/train_log.jsonl` (the run log,
    `cvbench.training.run_log.RunLog`) as a `corrupt_records` event with its `count`.

    Returns:
        The total over ranks, or None without `--skip-corrupt` (nothing is printed).
    """
    if not args.skip_corrupt:
        return None
    import numpy as np

    mine = task.corrupt_records() if task is not None else 0
    total = int(distribution.sum_arrays([np.array([mine], np.float64)])[0][0])
    if distribution.is_chief:
        noun = "record" if total == 1 else "records"
        print(f"cvbench: skipped {total} corrupt {noun} (--skip-corrupt)", flush=True)
        if log_dir is not None and Path(log_dir).is_dir():
            from cvbench.training.run_log import RunLog

            log = RunLog(log_dir, enabled=True, progress_bar=False, tensorboard=False)
            try:
                log.record("corrupt_records", count=total)
            finally:
                log.close()
    return total


def add_data_backend(p: argparse.ArgumentParser) -> None:
    """Adds --data-backend and --dali-device (classification models) to `p`."""
    p.add_argument(
        "--data-backend",
        choices=("tf", "dali", "grain"),
        default=None,
        help="input pipeline of a classifier: tf (tf.data), dali (NVIDIA DALI, the same "
        "recipe; needs pip install 'cvbench[dali]' and the index files that cvbench "
        "build-imagenet or cvbench dali-index DATA_DIR write) or grain (no TensorFlow: the "
        "same recipe and batches in NumPy; pip install 'cvbench[jax]'; a resume returns to "
        "the saved batch without reading the ones before it). Default: tf, or grain on "
        "--backend jax where TensorFlow cannot be imported",
    )
    p.add_argument(
        "--data-workers",
        type=int,
        default=None,
        help="with --data-backend grain: worker processes per rank that decode and augment "
        "(default 0: in the training process; each worker batches the records dealt to it, so "
        "which training records share a batch depends on the number, the order and each "
        "record's augmentation do not); "
        "refused with another reader, where it would have no effect",
    )
    p.add_argument(
        "--dali-device",
        choices=("cpu", "mixed"),
        default=None,
        help="with --data-backend dali: decode JPEGs on the CPU (cpu, default) or with nvJPEG "
        "on each rank's GPU (mixed); refused with another reader",
    )


def record_reader_of(args: argparse.Namespace) -> str | None:
    """`TaskOptions.reader` of --data-backend: "grain" or "tf" as named (DALI: "tf", the
    task's own reader), None when not given (grain on JAX without TensorFlow, else tf)."""
    backend = getattr(args, "data_backend", None)
    if backend is None:
        return None
    return "grain" if backend == "grain" else "tf"


def data_backend_kwargs(args: argparse.Namespace, *, task: str | None) -> dict[str, Any]:
    """The task arguments of --data-backend / --dali-device (none for tf.data and grain),
    checked: DALI and grain read classification records (`task`: the recipe's or model's
    task) from --data-dir; DALI needs its extra and the index files of the splits the
    command reads, grain needs grain."""
    if args.data_workers is not None and args.data_workers < 0:
        raise CLIError(f"--data-workers must be >= 0, got {args.data_workers}")
    if args.data_backend is not None:
        check_data_flags(args, args.data_backend)
    if args.data_backend in (None, "tf"):
        return {}
    name = args.data_backend
    _check_task_reads(name, task, model=args.model)
    if args.data_dir is None:
        raise CLIError(f"--data-backend {name} reads --data-dir records, not --synthetic data")
    if name == "grain":
        from cvbench.data.grain.dataset import import_grain

        try:
            import_grain()
        except ImportError as e:
            raise CLIError(str(e)) from e
        return {}
    from cvbench.data.dali.pipeline import import_dali
    from cvbench.data.dali_index import read_index
    from cvbench.data.read.reader import list_split_files
    from cvbench.utils.errors import BadFileError

    try:
        import_dali()
    except ImportError as e:
        raise CLIError(str(e)) from e
    for split in ("train", "validation"):
        try:
            files = list_split_files(args.data_dir, split)
        except (FileNotFoundError, BadFileError):
            # A missing or damaged split: the command's reader names it if it reads it
            # (eval never reads train).
            continue
        for path in files:
            read_index(path)  # FileNotFoundError / ValueError: one line naming the file
    return {"data_backend": "dali", "dali_device": args.dali_device or "cpu"}


def _check_task_reads(backend: str, task: str | None, *, model: str) -> None:
    """Refuses a data backend that the task (its class in `cvbench.tasks.TASKS`) cannot read
    its records with, naming the tasks that can."""
    from cvbench.tasks import TASKS

    if task is not None and backend in TASKS.get(task).data_backends:
        return
    readers = [kind for kind in TASKS.names() if backend in TASKS.get(kind).data_backends]
    raise CLIError(f"--data-backend {backend} is for {' and '.join(readers)} models, not {model}")


def print_results(trainer: Any, results: dict[str, float]) -> None:
    """Rank 0 prints `name: value` for each result."""
    if trainer.is_chief:
        for name, value in results.items():
            print(f"{name}: {value:.6g}", flush=True)
