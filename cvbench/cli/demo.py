"""`cvbench demo`: the shapes demo end to end (see `cvbench.demo.run`).

`--horovod N` builds the data once in this process, then runs the same demo under
`horovodrun -np N -H localhost:N --gloo`, one training process per rank; rank 0 prints and
writes the output folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cvbench.cli.args import output_path, positive_int, seed_int
from cvbench.cli.errors import CLIError

_PRECISIONS = ("fp32", "bf16", "fp16", "float32", "mixed_bfloat16", "mixed_float16")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `demo` subcommand."""
    p = subparsers.add_parser(
        "demo",
        help="train and evaluate a classifier and an SSD on generated shapes, no downloads",
        description="Draws a synthetic shapes data set, builds its TFRecords with the real "
        "builders, trains a ResNet-18 classifier and a small SSD with the Trainer, evaluates "
        "top-1 and COCO AP (pycocotools) and writes logs, plots, models and metrics.json to "
        "the output folder. A second run reuses the data.",
    )
    p.add_argument(
        "--output-dir",
        type=output_path,
        default="demo_out",
        help="output folder (default demo_out)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes (about a minute; low accuracy)")
    p.add_argument(
        "--horovod",
        type=positive_int,
        metavar="N",
        default=None,
        help="run under horovodrun with N local processes (Gloo)",
    )
    p.add_argument(
        "--precision",
        choices=_PRECISIONS,
        default=None,
        help="training precision (default: bf16 on CPUs with AVX512-BF16/AMX, fp16 on a GPU, "
        "otherwise fp32)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="data and training seed (default 0)")
    # Set by the --horovod launcher for its ranks: the data is already built.
    p.add_argument("--data-ready", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=handler)


def _horovodrun() -> str:
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.is_file() else shutil.which("horovodrun")
    if found is None:
        raise CLIError(
            "--horovod needs horovodrun, which was not found: install Horovod "
            "(scripts/build_horovod.sh, see DEVELOPERS.md)"
        )
    return found


def _launch(args: argparse.Namespace, config) -> int:
    from cvbench.demo.data import prepare_data
    from cvbench.demo.run import claim_output_dir

    out = claim_output_dir(args.output_dir)  # a user's folder is refused before data/ is made
    prepare_data(out / "data", config)
    n = args.horovod
    command = [
        _horovodrun(), "-np", str(n), "-H", f"localhost:{n}", "--gloo",
        sys.executable, "-m", "cvbench", "demo", "--output-dir", str(out),
        "--seed", str(args.seed), "--data-ready",
    ]  # fmt: skip
    if args.quick:
        command.append("--quick")
    if args.precision:
        command += ["--precision", args.precision]
    print("cvbench demo: " + " ".join(command), flush=True)
    return subprocess.call(command, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def handler(args: argparse.Namespace) -> int:
    from cvbench.demo.config import DemoConfig

    config = (DemoConfig.quick() if args.quick else DemoConfig()).replace(seed=args.seed)
    if args.horovod is not None:
        return _launch(args, config)
    from cvbench.demo.run import run_demo
    from cvbench.training.config import canonical_precision

    precision = None if args.precision is None else canonical_precision(args.precision)
    run_demo(args.output_dir, config=config, precision=precision, prepare=not args.data_ready)
    return 0
