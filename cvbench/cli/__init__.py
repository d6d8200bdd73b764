"""The `cvbench` command: argparse subcommands that call the public API.

Each area module exposes `register(subparsers)`, which adds its subcommands and sets
`func` on each: a callable taking the parsed `argparse.Namespace` and returning an exit code.
Misuse (bad flags, bad values, missing files) prints one line `cvbench: error: ...` and exits
with code 2, never a traceback. Failures at run time print one line
`cvbench COMMAND: error: ...` and exit with code 1: corrupt input data (TensorFlow's
`InvalidArgumentError` raised by cvbench's corrupt-record check, or a `DataLossError`), told
by the file and record, without TensorFlow's graph and stack text; a checkpoint that the
disk had no space for; a bad input file (`cvbench.utils.errors.BadFileError`: malformed, of
another kind, or over a size limit, named with the limit's flag); and any other `OSError` (a
read-only folder, a file where a folder is expected, a full disk), named by its path. Hints
written for the Python API (`pass skip_corrupt=True`) name the command's flags instead
(`pass --skip-corrupt`). A training stopped by SIGTERM or SIGINT after checkpointing its last
step prints one line naming the checkpoint and exits with 128 + the signal's number (143,
130). Any other exception is a bug and keeps its traceback; `cvbench --debug COMMAND ...`
or `CVBENCH_DEBUG=1` shows the traceback of every error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence

from cvbench.cli.tf_startup import quiet_tensorflow_startup
from cvbench.utils.errors import BadFileError, describe_os_error

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


#: Exit codes: misuse (argparse's own code) and a known failure at run time.
USAGE_ERROR, RUN_ERROR = 2, 1
#: Hints of the Python API's messages and what they are for users of the command.
_API_HINTS = (
    ("pass skip_corrupt=True", "pass --skip-corrupt"),
    ("pass force_resume=True", "pass --force-resume"),
    ("rerun with resume=True", "rerun with --resume"),
    ("for num_classes=", "for --num-classes "),
)
#: The label check of the input pipeline (`cvbench.data.pipeline.check_labels`).
_LABEL_ERROR = re.compile(r"is outside \[0, \d+\) for num_classes=\d+")
#: Lines of a TensorFlow error message that say where in the graph it happened, not what.
_TF_NOISE = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "[[")


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


def known_error(error: BaseException, *, command: str) -> tuple[str, int] | None:
    """The one line printed for `error` and the exit code, or None for an unknown kind (a
    bug, whose traceback is kept).

    Example:
        >>> known_error(ValueError("epochs must be >= 1, got 0"), command="train")
        ('cvbench: error: epochs must be >= 1, got 0', 2)
        >>> known_error(PermissionError(13, "Permission denied", "/ro"), command="export")
        ('cvbench export: error: /ro: Permission denied', 1)
        >>> known_error(BadFileError("m.keras: no config.json"), command="predict")
        ('cvbench predict: error: m.keras: no config.json', 1)
        >>> known_error(KeyError("x"), command="train") is None
        True
    """
    if isinstance(error, BadFileError):
        return f"cvbench {command}: error: {for_command_line(str(error))}", RUN_ERROR
    if isinstance(error, (CLIError, ValueError, FileNotFoundError, FileExistsError)):
        return f"cvbench: error: {for_command_line(str(error))}", USAGE_ERROR
    checkpoint = sys.modules.get("cvbench.training.checkpoint")  # loaded if it wrote one
    if checkpoint is not None and isinstance(error, checkpoint.CheckpointWriteError):
        return f"cvbench {command}: error: {for_command_line(str(error))}", RUN_ERROR
    message = _data_error(error)
    if message is not None:
        return f"cvbench {command}: error: {for_command_line(message)}", RUN_ERROR
    if isinstance(error, OSError):
        return f"cvbench {command}: error: {describe_os_error(error)}", RUN_ERROR
    return None


def for_command_line(message: str) -> str:
    """`message` with the Python API's hints turned into the command's flags.

    Example:
        >>> for_command_line("bad JPEG in f.tfrecord; pass skip_corrupt=True to skip it")
        'bad JPEG in f.tfrecord; pass --skip-corrupt to skip it'
    """
    for api, flag in _API_HINTS:
        message = message.replace(api, flag)
    return message


def _debug(args: argparse.Namespace) -> bool:
    flag = os.environ.get("CVBENCH_DEBUG", "").strip().lower()
    return bool(getattr(args, "debug", False)) or flag not in ("", "0", "false", "no")


def _data_error(error: BaseException) -> str | None:
    """What TensorFlow's error for bad input data says about the file and record, or None
    when `error` (or its cause) is not one: a `DataLossError`, or an `InvalidArgumentError`
    of cvbench's corrupt-record check (its message carries the skip_corrupt hint) or of its
    label check (a label outside the classes)."""
    tf = sys.modules.get("tensorflow")  # a TensorFlow error needs TensorFlow loaded
    if tf is None:
        return None
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        ours = "skip_corrupt=True" in str(error) or _LABEL_ERROR.search(str(error))
        if isinstance(error, tf.errors.DataLossError) or (
            isinstance(error, tf.errors.InvalidArgumentError) and ours
        ):
            return tf_error_line(error.message)
        error = error.__cause__ or error.__context__
    return None


def tf_error_line(message: str) -> str:
    """The line of a TensorFlow error message that says what went wrong: the text of a
    failed assertion, else the first line that is not graph or stack detail, without
    TensorFlow's iterator path and `[[node]]` / `[Op:...]` tags.

    Example:
        >>> tf_error_line("Graph execution error:\\n\\nDetected at node x defined at:\\n"
        ...     "Error in user-defined function passed to MapDataset:5 transformation with "
        ...     "iterator: Iterator::Root::Map: assertion failed: [bad image a.JPEG]\\n"
        ...     "\\t [[{{node x}}]] [Op:IteratorGetNext]")
        'bad image a.JPEG'
        >>> tf_error_line("corrupted record at 12 [Op:IteratorGetNext]")
        'corrupted record at 12'
    """
    assertion = re.search(r"assertion failed: \[(.*)\]", message)
    if assertion:
        return assertion.group(1).strip()
    for line in message.splitlines():
        line = line.strip()
        if not line or line.startswith(_TF_NOISE):
            continue
        line = re.sub(r"^.*?Iterator::\S*: ", "", line)
        line = re.sub(r"\s*(\[\[.*?\]\]|\[Op:[^\]]*\])", "", line).strip()
        if line:
            return line
    return message.strip()
