"""How the `cvbench` command reports an error: the one line it prints and its exit code.

Misuse (bad flags, bad values, missing files: `CLIError`, `ValueError`, `FileNotFoundError`,
`FileExistsError`) prints one line `cvbench: error: ...` and exits with code 2
(`USAGE_ERROR`), never a traceback. Failures at run time print one line
`cvbench COMMAND: error: ...` and exit with code 1 (`RUN_ERROR`): corrupt input data
(TensorFlow's `InvalidArgumentError` raised by cvbench's corrupt-record check, or a
`DataLossError`), told by the file and record, without TensorFlow's graph and stack text; a
checkpoint that the disk had no space for; another rank or host lost under Horovod
(`RankFailedError`, naming the lost ranks and host); a bad input file
(`cvbench.utils.errors.BadFileError`: malformed, of another kind, or over a size limit, named
with the limit's flag); and any other `OSError` (a read-only folder, a file where a folder is
expected, a full disk), named by its path. Hints written for the Python API
(`pass skip_corrupt=True`) name the command's flags instead (`pass --skip-corrupt`). Any other
exception is a bug: `known_error` returns None and the command keeps its traceback.

The subcommand modules import `CLIError` and `for_command_line` from here, not from
`cvbench.cli`, whose `__init__` imports them (through `importlib`): no module imports its
package's `__init__` back (tests/test_architecture.py).
"""

from __future__ import annotations

import re
import sys

from cvbench.utils.errors import BadFileError, describe_os_error

#: Exit codes: misuse (argparse's own code) and a known failure at run time.
USAGE_ERROR, RUN_ERROR = 2, 1
#: Hints of the Python API's messages and what they are for users of the command.
_API_HINTS = (
    ("pass skip_corrupt=True", "pass --skip-corrupt"),
    ("pass force_resume=True", "pass --force-resume"),
    ("rerun with resume=True", "rerun with --resume"),
    ("for num_classes=", "for --num-classes "),
)
#: The hint of the corrupt-record check (`cvbench.data.read.corrupt.SKIP_HINT`), when that
#: module is not loaded.
_SKIP_MARKER = "pass skip_corrupt=True to skip corrupt records"
#: The label check of the input pipeline (`cvbench.data.read.pipeline.check_labels`).
_LABEL_ERROR = re.compile(r"is outside \[0, \d+\) for num_classes=\d+")
#: Lines of a TensorFlow error message that say where in the graph it happened, not what.
_TF_NOISE = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "[[")


class CLIError(Exception):
    """A user error detected by a command handler; printed as one line, exit code 2."""


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
    distributed = sys.modules.get("cvbench.training.distributed")  # loaded by every training run
    if distributed is not None and isinstance(error, distributed.RankFailedError):
        # another rank or host was lost: its own output says why; this rank's line says which
        return f"cvbench {command}: error: {error}", RUN_ERROR
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


def _data_error(error: BaseException) -> str | None:
    """What TensorFlow's error for bad input data says about the file and record, or None
    when `error` (or its cause) is not one: a `DataLossError`, or an `InvalidArgumentError`
    of cvbench's corrupt-record check or of its label check (a label outside the classes).

    Python code names a bad input file by its class (`BadFileError`); an error raised inside
    a `tf.data` graph can carry only a message, so cvbench's own are told by the marker they
    end with: `cvbench.data.read.corrupt.SKIP_HINT` (the one constant both sides use), or
    the label check's wording."""
    tf = sys.modules.get("tensorflow")  # a TensorFlow error needs TensorFlow loaded
    if tf is None:
        return None
    corrupt = sys.modules.get("cvbench.data.read.corrupt")  # loaded by every pipeline
    marker = corrupt.SKIP_HINT.removeprefix("; ") if corrupt is not None else _SKIP_MARKER
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        ours = marker in str(error) or _LABEL_ERROR.search(str(error))
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
