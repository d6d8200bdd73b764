"""How the `cvbench` command reports an error: the one line it prints and its exit code.

cvbench's own errors (`cvbench.utils.errors.CvbenchError` and its subclasses) are mapped by
type: each says its exit code (`exit_code`). Misuse (`CLIError`, a bad value) prints one line
`cvbench: error: ...` and exits with code 2 (`USAGE_ERROR`), never a traceback; a failure at
run time prints one line `cvbench COMMAND: error: ...` and exits with code 1 (`RUN_ERROR`):
a bad input file (`BadFileError`: malformed, of another kind, or over a size limit, named
with the limit's flag), a checkpoint the disk had no space for, another rank or host lost
under Horovod (`RankFailedError`, naming the lost ranks and host). A training run stopped by
SIGTERM / SIGINT (`TrainingInterruptedError`) exits with 128 + the signal's number and its
line says what was kept, without `error:`.

Python's own errors keep their meaning: a `ValueError`, `FileNotFoundError` or
`FileExistsError` is misuse (2), any other `OSError` (a read-only folder, a file where a
folder is expected, a full disk) a failure at run time (1), named by its path; Keras'
`ValueError` of a failed model call (`Exception encountered when calling ...`) is a failure at
run time (1), printed as the call and its message's first line (`keras_call_error`), and no
line keeps a terminal's colour codes. Corrupt input
data is told by TensorFlow's error raised inside a `tf.data` graph, which can carry only a
message: a `DataLossError`, or an `InvalidArgumentError` of cvbench's corrupt-record or label
check (told by their wording), printed by the file and record without TensorFlow's graph and
stack text (1). Hints written for the Python API (`pass skip_corrupt=True`) name the
command's flags instead (`pass --skip-corrupt`). Any other exception is a bug: `known_error`
returns None and the command keeps its traceback.

The subcommand modules import `CLIError` and `for_command_line` from here, not from
`cvbench.cli`, whose `__init__` imports them (through `importlib`): no module imports its
package's `__init__` back (tests/test_architecture.py).
"""

from __future__ import annotations

import re
import sys

from cvbench.utils.errors import (  # noqa: F401 - BadFileError: re-exported, its old path
    RUN_ERROR,
    USAGE_ERROR,
    BadFileError,
    CvbenchError,
    describe_os_error,
    missing_tensorflow_line,
    tensorflow_import_failure,
)

#: Exit codes over this one are a shell's code for a signal (128 + its number): a stop that
#: kept what it finished, not a failure; its line has no `error:`.
SIGNAL_EXIT = 128
#: Hints of the Python API's messages and what they are for users of the command.
_API_HINTS = (
    ("pass skip_corrupt=True", "pass --skip-corrupt"),
    ("pass force_resume=True", "pass --force-resume"),
    ("as force_resume=True asks", "as --force-resume asks"),
    ("rerun with resume=True", "rerun with --resume"),
    ("for num_classes=", "for --num-classes "),
    ("overwrite=True replaces", "--overwrite replaces"),  # export_for_serving's info file
)
#: The hint of the corrupt-record check (`cvbench.data.read.corrupt.SKIP_HINT`), when that
#: module is not loaded.
_SKIP_MARKER = "pass skip_corrupt=True to skip corrupt records"
#: The start of the stop of a --skip-corrupt stream whose every record is damaged
#: (`cvbench.data.read.corrupt.ALL_DAMAGED`), where that module is not loaded.
_ALL_DAMAGED = "every record met was damaged"
#: The label check of the input pipeline (`cvbench.data.read.pipeline.check_labels`).
_LABEL_ERROR = re.compile(r"is outside \[0, \d+\) for num_classes=\d+")
#: A terminal's colour and style codes (`\x1b[1m`), which Keras puts in its messages.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: The wrapper of Keras' error for a failed layer or model call; group 1 names the call.
_KERAS_CALL = re.compile(r"Exception encountered when calling (\S+?)\.?\s*\n")
#: Lines of a TensorFlow error message that say where in the graph it happened, not what.
_TF_NOISE = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "[[")


class CLIError(CvbenchError):
    """A user error detected by a command handler; printed as one line, exit code 2."""

    exit_code = USAGE_ERROR


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
    if isinstance(error, CvbenchError):
        code = error.exit_code
    elif isinstance(error, ValueError) and (message := keras_call_error(str(error))):
        return f"cvbench {command}: error: {message}", RUN_ERROR  # a model failed: not misuse
    elif isinstance(error, (ValueError, FileNotFoundError, FileExistsError)):
        code = USAGE_ERROR
    elif (message := _data_error(error)) is not None:
        return f"cvbench {command}: error: {for_command_line(message)}", RUN_ERROR
    elif tensorflow_import_failure(error):  # a path that did not say what needed it
        line = missing_tensorflow_line("this command", error)
        return f"cvbench {command}: error: {for_command_line(line)}", RUN_ERROR
    elif isinstance(error, OSError):
        code = RUN_ERROR
    else:
        return None
    return _error_line(error, code, command=command), code


def _error_line(error: BaseException, code: int, *, command: str) -> str:
    """The line of `error` with exit code `code`: misuse names no command. cvbench's own
    errors are their message; Python's `OSError` is named by its path(s)
    (`describe_os_error`)."""
    ours = isinstance(error, CvbenchError) or not isinstance(error, OSError)
    text = str(error) if ours else describe_os_error(error)
    text = for_command_line(_ANSI.sub("", text))
    if code == USAGE_ERROR:
        return f"cvbench: error: {text}"
    if code > SIGNAL_EXIT:
        return f"cvbench {command}: {text}"
    return f"cvbench {command}: error: {text}"


def keras_call_error(message: str) -> str | None:
    r"""What Keras' error of a failed layer or model call says, without its wrapper (`Exception
    encountered when calling X.call().`), its terminal colour codes and its `Arguments
    received` block: `X.call(): <the first line of the inner message>`; None for another
    message.

    Example:
        >>> keras_call_error("Exception encountered when calling M.call().\n\n\x1b[1m"
        ...     "Input 0 is incompatible\x1b[0m\n\nArguments received by M.call():\n  x")
        'M.call(): Input 0 is incompatible'
        >>> keras_call_error("epochs must be >= 1") is None
        True
    """
    found = _KERAS_CALL.match(message)
    if found is None:
        return None
    inner = _ANSI.sub("", message[found.end() :])
    lines = [line.strip() for line in inner.splitlines() if line.strip()]
    first = lines[0] if lines and not lines[0].startswith("Arguments received") else "failed"
    return f"{found.group(1)}: {first}"


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
    # a --skip-corrupt stream whose every record is damaged stops with this (corrupt.py)
    stop = corrupt.ALL_DAMAGED if corrupt is not None else _ALL_DAMAGED
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        ours = marker in text or stop in text or _LABEL_ERROR.search(text)
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
