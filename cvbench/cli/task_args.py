"""The flags `cvbench train`, `eval` and `benchmark` share (model, data, batch, precision,
corrupt data), the task they select (`cvbench.tasks.make_task`), and the report of the
corrupt records `--skip-corrupt` skipped."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cvbench.cli.args import positive_int
from cvbench.cli.errors import CLIError

_PRECISIONS = ("auto", "fp16", "bf16", "fp32")


def add_model_and_data(
    p: argparse.ArgumentParser, *, synthetic_help: str, recipes: bool = False
) -> None:
    """Adds --model, --data-dir | --synthetic, --batch-size, --image-size, --num-classes,
    --precision, --seed and --skip-corrupt to `p`; with `recipes` (`cvbench train`),
    `--model` may be left to `--recipe` and `--batch-size` defaults to the recipe's."""
    p.add_argument(
        "--model",
        required=not recipes,
        help="model name, e.g. resnet50, inception_v3"
        + (" (default: the model of --recipe)" if recipes else ""),
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data-dir", help="directory of ImageNet-format TFRecords (train-*, validation-*)"
    )
    source.add_argument("--synthetic", action="store_true", help=synthetic_help)
    if recipes:
        p.add_argument(
            "--batch-size",
            type=positive_int,
            default=None,
            help="images per rank and step (default: the recipe's, e.g. 256 for ResNet-50 and "
            "32 for SSD320; 256 for a model without a recipe)",
        )
    else:
        p.add_argument(
            "--batch-size", type=positive_int, default=256, help="images per rank and step (256)"
        )
    p.add_argument(
        "--image-size", type=positive_int, default=None, help="input size (model default)"
    )
    p.add_argument(
        "--num-classes",
        type=positive_int,
        default=None,
        help="classes the model predicts (default: the classes in --data-dir's "
        "dataset_info.json, which cvbench build-imagenet and build-coco write; a different "
        "number is an error; records without that file need --num-classes; --synthetic: 1000 "
        "for classifiers, 90 for SSD)",
    )
    p.add_argument(
        "--precision",
        choices=_PRECISIONS,
        default="auto",
        help="fp16 (mixed float16, dynamic loss scaling), bf16 (mixed bfloat16), fp32, or "
        "auto: fp16 on a GPU, bf16 on a CPU with native bfloat16 (AVX512-BF16 or AMX), fp32 "
        "on other CPUs (default auto)",
    )
    p.add_argument("--seed", type=int, default=None, help="random seed (default: none)")
    p.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip corrupt records and undecodable images of --data-dir (each named on "
        "stderr, the total printed at the end) instead of stopping with an error naming the "
        "file and record",
    )


def task_from_args(
    args: argparse.Namespace,
    *,
    synthetic_steps: int = 100,
    label_smoothing: float | None = None,
    recipe: Any = None,
    **task_kwargs: Any,
):
    """The task `args` select (`--data-dir` must be a folder: a one-line error if not), with
    `recipe` (a resolved `Recipe`, or None) and the task class's own `task_kwargs`."""
    from cvbench.tasks import TaskOptions, make_task

    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise CLIError(f"--data-dir {args.data_dir!r} is not a directory")
    options = TaskOptions(
        model=args.model,
        data_dir=args.data_dir,
        image_size=args.image_size,
        num_classes=args.num_classes,
        label_smoothing=label_smoothing,
        synthetic_steps=synthetic_steps,
        skip_corrupt=args.skip_corrupt,
        recipe=recipe,
    )
    return make_task(options, **task_kwargs)


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
        choices=("tf", "dali"),
        default="tf",
        help="input pipeline of a classifier: tf (tf.data, default) or dali (NVIDIA DALI, the "
        "same recipe; needs pip install 'cvbench[dali]' and the index files that cvbench "
        "build-imagenet or cvbench dali-index DATA_DIR write)",
    )
    p.add_argument(
        "--dali-device",
        choices=("cpu", "mixed"),
        default="cpu",
        help="with --data-backend dali: decode JPEGs on the CPU (cpu, default) or with nvJPEG "
        "on each rank's GPU (mixed)",
    )


def data_backend_kwargs(args: argparse.Namespace, *, task: str | None) -> dict[str, Any]:
    """The task arguments of --data-backend / --dali-device (none for tf.data), checked:
    DALI reads classification records (`task`: the recipe's or model's task), needs
    --data-dir, its extra and the index files of the splits the command reads."""
    if args.data_backend == "tf":
        if args.dali_device != "cpu":
            raise CLIError("--dali-device needs --data-backend dali")
        return {}
    if task != "classification":
        raise CLIError(f"--data-backend dali is for classification models, not {args.model}")
    if args.data_dir is None:
        raise CLIError("--data-backend dali reads --data-dir records, not --synthetic data")
    from cvbench.data.dali import import_dali
    from cvbench.data.dali_index import read_index
    from cvbench.data.reader import list_split_files

    try:
        import_dali()
    except ImportError as e:
        raise CLIError(str(e)) from e
    for split in ("train", "validation"):
        try:
            files = list_split_files(args.data_dir, split)
        except FileNotFoundError:
            continue  # the command's reader names a missing split
        for path in files:
            read_index(path)  # FileNotFoundError / ValueError: one line naming the file
    return {"data_backend": "dali", "dali_device": args.dali_device}
