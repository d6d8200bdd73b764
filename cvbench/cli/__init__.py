"""The `cvbench` command: argparse subcommands that call the public API.

Each area module exposes `register(subparsers)`, which adds its subcommands and sets
`func` on each: a callable taking the parsed `argparse.Namespace` and returning an exit code.
Misuse (bad flags, bad values, missing files) prints one line `cvbench: error: ...` and exits
with code 2, never a traceback; a known failure at run time (corrupt data, a bad input file,
a full or read-only disk) prints one line `cvbench COMMAND: error: ...` and exits with code 1
(`cvbench.cli.errors` says which errors and how they read). A training stopped by SIGTERM or
SIGINT after checkpointing its last step prints one line naming the checkpoint and exits with
128 + the signal's number (143, 130). Any other exception is a bug and keeps its traceback;
`cvbench --debug COMMAND ...` or `CVBENCH_DEBUG=1` shows the traceback of every error.

The subcommand modules import nothing from this `__init__` (it imports them): `CLIError` and
the error lines live in `cvbench.cli.errors`; `cvbench.cli.CLIError` is the same class.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from cvbench.cli.errors import CLIError, for_command_line, known_error
from cvbench.cli.tf_startup import quiet_tensorflow_startup

__all__ = ["CLIError", "build_parser", "main"]

# Explicit list of the modules that contribute subcommands (no import side effects).
_COMMAND_MODULES = (
    "cvbench.cli.acquire",
    "cvbench.cli.imagenet",
    "cvbench.cli.coco",
    "cvbench.cli.train",
    "cvbench.cli.benchmark",
    "cvbench.cli.demo",
    "cvbench.cli.predict",
    "cvbench.cli.export",
    "cvbench.cli.recipes",
)


class _Parser(argparse.ArgumentParser):
    """No abbreviated options: `--epoch 3` is an error, not `--epochs 3`, so that a new
    option can never change what an existing command line means. Subcommands inherit it."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """Returns the top-level parser with every subcommand registered."""
    parser = _Parser(
        prog="cvbench",
        description="Train, evaluate and benchmark convolutional networks with Keras 3.",
    )
    from cvbench import __version__

    parser.add_argument("--version", action="version", version=f"cvbench {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of any error (also CVBENCH_DEBUG=1)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


@quiet_tensorflow_startup()  # TensorFlow's C++ start-up messages, unless TF_CPP_MIN_LOG_LEVEL
def main(argv: Sequence[str] | None = None) -> int:
    """Runs the `cvbench` command; returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("cvbench: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        signals = sys.modules.get("cvbench.training.signals")  # loaded if it trained
        if signals is not None and isinstance(e, signals.TrainingInterruptedError):
            # SIGTERM / SIGINT during training: the last step was checkpointed.
            print(f"cvbench {args.command}: {for_command_line(str(e))}", file=sys.stderr)
            return e.exit_code
        known = None if _debug(args) else known_error(e, command=args.command)
        if known is None:
            raise
        line, code = known
        print(line, file=sys.stderr)
        return code


def _debug(args: argparse.Namespace) -> bool:
    flag = os.environ.get("CVBENCH_DEBUG", "").strip().lower()
    return bool(getattr(args, "debug", False)) or flag not in ("", "0", "false", "no")
