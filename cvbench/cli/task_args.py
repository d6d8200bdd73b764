"""The flags `cvbench train`, `eval` and `benchmark` share (model, data, batch, precision)
and the task they select (`cvbench.tasks.make_task`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cvbench.cli import CLIError
from cvbench.cli.args import positive_int

_PRECISIONS = ("auto", "fp16", "bf16", "fp32")


def add_model_and_data(p: argparse.ArgumentParser, *, synthetic_help: str) -> None:
    """Adds --model, --data-dir | --synthetic, --batch-size, --image-size, --num-classes,
    --precision and --seed to `p`."""
    p.add_argument("--model", required=True, help="model name, e.g. resnet50, inception_v3")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data-dir", help="directory of ImageNet-format TFRecords (train-*, validation-*)"
    )
    source.add_argument("--synthetic", action="store_true", help=synthetic_help)
    p.add_argument(
        "--batch-size", type=positive_int, default=256, help="images per rank and step (256)"
    )
    p.add_argument(
        "--image-size", type=positive_int, default=None, help="input size (model default)"
    )
    p.add_argument(
        "--num-classes", type=positive_int, default=None, help="classes (1000 for ImageNet)"
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


def task_from_args(args: argparse.Namespace, *, synthetic_steps: int = 100, label_smoothing=None):
    """The task `args` select (`--data-dir` must be a folder: a one-line error if not)."""
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
    )
    return make_task(options)
