"""The `cvbench` command: argparse subcommands that call the public API.

Each area module exposes `register(subparsers)`, which adds its subcommands and sets
`func` on each: a callable taking the parsed `argparse.Namespace` and returning an exit code.
Misuse (bad flags, bad values, missing files) prints one line `cvbench: error: ...` and exits
with code 2, never a traceback; a known failure at run time (corrupt data, a bad input file,
a full or read-only disk) prints one line `cvbench COMMAND: error: ...` and exits with code 1
(`cvbench.cli.errors` says which errors and how they read). A training stopped by SIGTERM or
SIGINT after checkpointing its last step prints one line naming the checkpoint and exits with
128 + the signal's number (143, 130). In every other phase of every command (building a
model, evaluating, exporting, predicting, building data) SIGTERM or SIGINT stops the command
at once: `main` installs one handler for all commands (`stop_on_signals`), which raises
`StopSignalReceived`; the command's `finally` blocks remove what it had half-written (staging
folders, temporary files), and it prints one line `cvbench COMMAND: SIGTERM received:
stopped; <what is kept>` (each command's `kept_on_stop`) and exits with the same 143 or 130.
An error line is one line: control characters of a file name in it are escaped (`a\\nb.png`).
Any other exception is a bug and keeps its traceback; `cvbench --debug COMMAND ...` or
`CVBENCH_DEBUG=1` shows the traceback of every error.

The subcommand modules import nothing from this `__init__` (it imports them): `CLIError` and
the error lines live in `cvbench.cli.errors`; `cvbench.cli.CLIError` is the same class.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from cvbench.cli.errors import SIGNAL_EXIT, CLIError, for_command_line, known_error
from cvbench.cli.tf_startup import quiet_tensorflow_startup
from cvbench.utils.signals import STOP_SIGNALS, StopHandlers

__all__ = ["CLIError", "StopSignalReceived", "build_parser", "main", "run"]

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
    option can never change what an existing command line means; a refused command line is
    one line, as every other error (`error`). Subcommands inherit it (argparse makes each
    subparser of the parser's own class)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but arguments no parser knows are refused by the command's own
        parser, whose line names the command (argparse refuses them at the root)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = self._subparsers._group_actions[0].choices if self._subparsers else {}
            parser = commands.get(getattr(parsed, "command", None), self)
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        """Exits with code 2 after one line on stderr, `cvbench train: error: unrecognized
        arguments: --bogus (see cvbench train --help)`: without argparse's usage block
        before it, and with the user's control characters escaped."""
        from cvbench.utils.errors import printable

        line = printable(f"{self.prog}: error: {message}")
        self.exit(2, f"{line} (see {self.prog} --help)\n")


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


#: The arguments of each command that name an output; a link given there is resolved once
#: (`cvbench.utils.files.user_output`), so the command writes to, checks and prints its
#: target; links inside an output are never followed.
OUTPUT_ARGS = {
    "train": ("log_dir",),
    "eval": ("json", "log_dir"),
    "predict": ("coco_json", "draw"),
    "export": ("output",),
    "benchmark": ("json",),
    "build-imagenet": ("output_dir",),
    "build-coco": ("out",),
    "dali-index": ("index_dir",),
    "download-coco": ("dir", "build_tfrecords"),
    "extract-imagenet": ("out",),
    "demo": ("output_dir",),
}
#: The commands that read a data set (`--data-dir`): none of their outputs (`OUTPUT_ARGS`)
#: may be that folder or lie inside it (`refuse_outputs_in_data`).
DATA_READERS = ("train", "eval", "benchmark")

#: What a command stopped by a signal keeps, unless it says (`kept_on_stop` in its defaults).
_KEPT_BY_DEFAULT = "what it had finished is kept"


class StopSignalReceived(BaseException):
    """SIGTERM or SIGINT outside training's graceful stop: the command stops at once.

    A `BaseException`, as `KeyboardInterrupt`: `except Exception` blocks let it through and
    `finally` blocks clean up. Training's own stop (`cvbench.training.signals.StopRequest`)
    installs its handlers over these ones while it trains and puts them back after.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"{STOP_SIGNALS.get(signum, f'signal {signum}')} received")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, a shell's code for a process the signal ended."""
        return 128 + self.signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM and SIGINT raise
    `StopSignalReceived`; after the first, a second SIGTERM is ignored (the cleanup runs) and
    a second SIGINT raises `KeyboardInterrupt` (a user who does not want to wait). A process
    forked inside the block (a builder's worker) gets the signal's default action instead.
    The handler is installed with `cvbench.utils.signals.StopHandlers`: what it raises is
    never lost (raised while a garbage-collection callback such as JAX's runs, Python drops
    it: it is raised again), and a block that ends normally after a stop signal raises it
    as it ends, so a command never exits 0 after one.

    Example:
        >>> try:
        ...     with stop_on_signals():
        ...         os.kill(os.getpid(), signal.SIGTERM)
        ... except StopSignalReceived as e:
        ...     print(e, e.exit_code)
        SIGTERM received 143
    """
    owner, received = os.getpid(), []

    def handle(signum: int) -> None:
        if os.getpid() != owner:  # a forked worker: the signal's default action
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if received:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        received.append(signum)
        raise StopSignalReceived(signum)

    with StopHandlers(handle):
        yield


@quiet_tensorflow_startup()  # TensorFlow's C++ start-up messages, unless TF_CPP_MIN_LOG_LEVEL
def main(argv: Sequence[str] | None = None) -> int:
    """Runs the `cvbench` command; returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    links: list[tuple[str, str]] = []
    try:
        with stop_on_signals():
            links = resolve_outputs(args, parser)
            refuse_outputs_in_data(args)
            with warning_lines(args.command):
                return int(args.func(args) or 0)
    except StopSignalReceived as e:
        print(f"cvbench {args.command}: {e}: stopped; {_kept(args)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("cvbench: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        known = known_error(e, command=args.command)
        # --debug keeps the traceback of an error; a signal's stop is not one (it was asked)
        if known is None or (_debug(args) and known[1] <= SIGNAL_EXIT):
            _release_frames(e)
            raise
        line, code = known
        for given, resolved in links:  # the line names the target: say whose it is
            if resolved in line:
                line += f" ({given} is a link to {resolved})"
        from cvbench.utils.errors import printable

        print(printable(line), file=sys.stderr)  # one line: a file name's newline escaped
        return code


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The `cvbench` program (its console script and `python -m cvbench`): `main(argv)`, then
    the process exits with its code.

    After a stop signal (an exit code over `SIGNAL_EXIT`: 143 for SIGTERM, 130 for Ctrl-C) the
    process ends right after its stop line, stdout and stderr flushed, without the
    interpreter's shutdown (`os._exit`): what the command keeps was written before the line.
    A compilation the JAX runtime was still running in its own thread (a train step's, when
    the signal came before the first step) crashed that shutdown: exit 139 (a segmentation
    fault) instead of 143 in 4 of 6 runs of `cvbench train` on JAX stopped 7 s after start.
    """
    code = main(argv)
    if code > SIGNAL_EXIT:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing to add
                stream.flush()
        os._exit(code)
    sys.exit(code)


def _release_frames(error: BaseException) -> None:
    """Clears the local variables of the finished frames of `error`'s traceback (and of the
    errors it chains), then collects: what they held (a `tf.data` iterator and its threads)
    is released now, not while the interpreter shuts down, where TensorFlow's iterator
    threads sometimes hung it for good after the traceback was printed (`--debug` of a
    corrupt record: 1 run in 4 on 2 busy cores). The traceback still prints in full (file,
    line and code; no locals)."""
    import gc
    import traceback

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__
    gc.collect()


def resolve_outputs(
    args: argparse.Namespace, parser: argparse.ArgumentParser | None = None
) -> list[tuple[str, str]]:
    """Resolves, once, each output argument of the command (`OUTPUT_ARGS`) that is a
    symbolic link (`cvbench.utils.files.user_output`); returns `(given, target)` of each.
    An output that is a stream (`-`, `/dev/stdout`, a FIFO) is refused, naming its option as
    `parser` (the `cvbench` parser) spells it.

    Raises:
        ValueError: an output that is a stream (exit 2).
    """
    from cvbench.utils.files import user_output

    links = []
    command = getattr(args, "command", None)
    for dest in OUTPUT_ARGS.get(command, ()):
        given = getattr(args, dest, None)
        resolved = user_output(given, flag=_option_name(parser, command, dest))
        if resolved is not given:
            setattr(args, dest, resolved)
            links.append((os.fspath(given), os.fspath(resolved)))
    return links


def _option_name(parser: argparse.ArgumentParser | None, command: str | None, dest: str) -> str:
    """How `command`'s help names the argument `dest`: its longest option (`--json`), or
    the positional's metavar (`OUT`); `--<dest>` without a parser."""
    commands = parser._subparsers._group_actions[0].choices if parser is not None else {}
    for action in getattr(commands.get(command), "_actions", ()):
        if action.dest == dest:
            if action.option_strings:
                return max(action.option_strings, key=len)
            return action.metavar or dest.upper()
    return f"--{dest.replace('_', '-')}"


@contextlib.contextmanager
def warning_lines(command: str) -> Iterator[None]:
    """While the block runs, a warning cvbench's own code issues (`warnings.warn` in a
    module of the `cvbench` package) reads as one line, `cvbench train: warning: <message>`
    (its control characters escaped), not as Python's `file:line: UserWarning:` and source
    line, its hints naming the flags (`for_command_line`: `as --force-resume asks`)
    (`warnings.formatwarning`: where and whether it is shown stays Python's); other
    libraries' warnings, and a library user's, keep Python's format.

    Example:
        >>> import warnings
        >>> from cvbench.training import config
        >>> with warning_lines("train"):
        ...     warnings.formatwarning("resuming", UserWarning, config.__file__, 1)
        'cvbench train: warning: resuming\\n'
    """
    import warnings

    from cvbench.utils.errors import printable

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    python_format = warnings.formatwarning

    def format_line(message, category, filename, lineno, line=None) -> str:
        if not os.path.abspath(filename).startswith(package):
            return python_format(message, category, filename, lineno, line)
        return printable(f"cvbench {command}: warning: {for_command_line(str(message))}") + "\n"

    warnings.formatwarning = format_line
    try:
        yield
    finally:
        warnings.formatwarning = python_format


#: Names in a data folder that its readers read (shards, the data set's own files): an
#: output there would become part of the data.
_DATA_NAME = re.compile(
    r".+-[0-9]{5}-of-[0-9]{5}|dataset_info\.json|cvbench_manifest\.json|idx|instances_.*\.json"
)


def refuse_outputs_in_data(args: argparse.Namespace) -> None:
    """Refuses, before any work, an output of a command that reads `--data-dir`
    (`DATA_READERS`) that is that folder, or a file or folder directly in it that its readers
    would read (a shard's name, `dataset_info.json`, the build manifest, `idx`, COCO's
    `instances_*.json`; links resolved): a `--json` named as a shard breaks its split. Other
    names in it, and sub-folders (`DATA/runs/r1`), are never read as data and are allowed.

    Raises:
        CLIError: naming the flag, the output and the data folder (exit 2).

    Example:
        >>> args = argparse.Namespace(command="eval", data_dir="rec", log_dir=None,
        ...                           json="rec/validation-00000-of-00002")
        >>> refuse_outputs_in_data(args)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cvbench.cli.errors.CLIError: --json rec/validation-00000-of-00002 would be read as ...
        >>> refuse_outputs_in_data(argparse.Namespace(command="train", data_dir="rec",
        ...                                           log_dir="rec/runs/r1"))
    """
    data_dir = getattr(args, "data_dir", None)
    if args.command not in DATA_READERS or data_dir is None:
        return
    data = Path(data_dir).resolve()
    for dest in OUTPUT_ARGS.get(args.command, ()):
        output = getattr(args, dest, None)
        if output is None or not os.fspath(output).strip():
            continue  # no output, or an empty one: the command's own line says so
        target, flag = Path(output).resolve(), f"--{dest.replace('_', '-')} {os.fspath(output)}"
        if target == data:
            raise CLIError(
                f"{flag} is the --data-dir folder {data_dir}: cvbench never writes into the "
                "data it reads; write elsewhere"
            )
        if target.parent == data and _DATA_NAME.fullmatch(target.name):
            raise CLIError(
                f"{flag} would be read as part of the data in --data-dir {data_dir}: cvbench "
                "never writes what its readers read; choose another name or folder"
            )


def _kept(args: argparse.Namespace) -> str:
    """What a command stopped by a signal keeps: its `kept_on_stop(args)` (set with
    `set_defaults`), or `_KEPT_BY_DEFAULT`."""
    describe: Callable[[argparse.Namespace], str] | None = getattr(args, "kept_on_stop", None)
    return _KEPT_BY_DEFAULT if describe is None else describe(args)


def _debug(args: argparse.Namespace) -> bool:
    flag = os.environ.get("CVBENCH_DEBUG", "").strip().lower()
    return bool(getattr(args, "debug", False)) or flag not in ("", "0", "false", "no")
