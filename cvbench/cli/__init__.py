"""The `cvbench` command: argparse subcommands that call the public API.

Each area module exposes `register(subparsers)`, which adds its subcommands and sets
`func` on each: a callable taking the parsed `argparse.Namespace` and returning an exit code.
Misuse (bad flags, bad values, missing files) prints one line `cvbench: error: ...` and exits
with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Explicit list of the modules that contribute subcommands (no import side effects).
_COMMAND_MODULES = (
    "cvbench.cli.acquire",
    "cvbench.cli.imagenet",
    "cvbench.cli.coco",
    "cvbench.cli.train",
    "cvbench.cli.benchmark",
    "cvbench.cli.demo",
)


class CLIError(Exception):
    """A user error detected by a command handler; printed as one line, exit code 2."""


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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the `cvbench` command; returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CLIError, ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"cvbench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cvbench: interrupted", file=sys.stderr)
        return 130
