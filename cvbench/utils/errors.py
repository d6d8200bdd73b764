"""cvbench's error base, the error a bad input file raises, and the one-line description of
an `OSError`.

`CvbenchError` is the base of every error cvbench raises on purpose; its class says the exit
code the `cvbench` command maps it to (`exit_code`: `RUN_ERROR` 1 or `USAGE_ERROR` 2), so the
command maps errors by type (`cvbench.cli.errors.known_error`), not by their message text.

`BadFileError` is a `ValueError` (Python callers that catch `ValueError` keep working) whose
message names the file and what is wrong with it, or the limit it exceeds and how to raise
that limit. The `cvbench` command prints it as one line with exit code 1, like corrupt
records, where a bad argument (a plain `ValueError`) exits with 2.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

#: Exit codes of the `cvbench` command: misuse (argparse's own code) and a failure at run time.
USAGE_ERROR, RUN_ERROR = 2, 1


class CvbenchError(Exception):
    """The base of cvbench's own errors: a failure the package names and the `cvbench`
    command reports as one line, with the exit code its class says (`exit_code`), where any
    other exception is a bug that keeps its traceback. Each kind also keeps the built-in
    base that Python callers catch (`ValueError`, `OSError`, `RuntimeError`).

    Attributes:
        exit_code: `RUN_ERROR` (1) for a failure at run time, the default; `USAGE_ERROR`
            (2) for misuse (a bad argument or value).

    Example:
        >>> class NoFoldersError(CvbenchError, OSError):
        ...     "Folders cannot be made here."
        >>> error = NoFoldersError("no folders")
        >>> isinstance(error, OSError), error.exit_code
        (True, 1)
    """

    exit_code: int = RUN_ERROR


class BadFileError(CvbenchError, ValueError):
    """An input file that cannot be used: malformed, of another kind, or over a size limit.

    Example:
        >>> str(BadFileError("model.keras: cvbench.json is not an object"))
        'model.keras: cvbench.json is not an object'
        >>> isinstance(BadFileError("x"), ValueError)
        True
    """

    exit_code = RUN_ERROR  # over ImageError's in ImageFileError(BadFileError, ImageError)


def describe_os_error(error: OSError) -> str:
    """One line for an `OSError`: what failed, on which path(s).

    Example:
        >>> describe_os_error(PermissionError(13, "Permission denied", "/ro/out"))
        '/ro/out: Permission denied'
        >>> describe_os_error(OSError(28, "No space left on device"))
        'No space left on device'
        >>> describe_os_error(OSError(18, "Invalid cross-device link", "a", None, "b"))
        'a -> b: Invalid cross-device link'
    """
    reason = error.strerror or (os.strerror(error.errno) if error.errno else "") or str(error)
    paths = [os.fsdecode(p) for p in (error.filename, error.filename2) if p is not None]
    return f"{' -> '.join(paths)}: {reason}" if paths else reason


@contextlib.contextmanager
def naming(path: str | os.PathLike, *, replace: bool = False) -> Iterator[None]:
    """Re-raises an `OSError` of the block as the same error naming `path`, so that its
    one-line description says which file it was: one without a file name (a full disk seen
    by `write` or `close`), or with `replace` also one naming another file (the temporary
    written beside `path`, instead of the file the user asked for).

    Example:
        >>> import errno
        >>> try:
        ...     with naming("out/idx/a.idx"):
        ...         raise OSError(errno.ENOSPC, "No space left on device")
        ... except OSError as e:
        ...     print(e.filename, e.strerror)
        out/idx/a.idx No space left on device
        >>> with naming("out.json", replace=True):
        ...     raise OSError(errno.EROFS, "Read-only file system", ".out.json.x1.tmp")
        Traceback (most recent call last):
        ...
        OSError: [Errno 30] Read-only file system: 'out.json'
    """
    try:
        yield
    except OSError as e:
        if (e.filename is not None and not replace) or (replace and e.errno is None):
            raise
        reason = e.strerror or (os.strerror(e.errno) if e.errno else str(e))
        raise OSError(e.errno, reason, os.fspath(path)) from e


def printable(text: str) -> str:
    r"""`text` with every character that is not printable escaped as Python writes it: a
    file name's newline cannot start a line of the summary, nor a name that is not UTF-8
    (decoded into surrogates) fail to print.

    Example:
        >>> printable("a\nforged 1.000.jpg"), printable("caf\udce9.jpg")
        ('a\\nforged 1.000.jpg', 'caf\\udce9.jpg')
    """
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def check_utf8(text: str, *, what: str) -> str:
    r"""`text`, refused when it is not valid UTF-8 text: a name read from bytes that are not
    UTF-8 (Python decodes a folder name holding the byte 0xff into the surrogate `\udcff`)
    or from a JSON `\ud800` escape. Such a name cannot be written where text is UTF-8 (a
    TensorFlow string tensor of an exported model, a terminal, another tool's JSON reader),
    so it is refused where it enters (a class name: `ClassInfo`, `ModelInfo`), one line
    naming it as `ascii()` writes it.

    Raises:
        ValueError: naming `what` and the text.

    Example:
        >>> check_utf8("caf\u00e9", what="class name")
        'café'
        >>> check_utf8("b\udcff", what="class name")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: class name 'b\udcff' is not valid UTF-8 (...); rename it
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{what} {ascii(text)} is not valid UTF-8 (each \\udcXX is a byte XX that is not "
            "UTF-8, e.g. in a folder name); rename it"
        ) from None
    return text


class TensorFlowMissingError(CvbenchError, ImportError):
    """What needs TensorFlow (writing TFRecords, tf.data, SavedModel) where `import
    tensorflow` fails: the message says what needed it and why the import failed (exit 1)."""


def tensorflow_import_failure(error: BaseException) -> bool:
    """Whether `error` is `import tensorflow` failing: a missing module named `tensorflow...`,
    or an `ImportError` raised from inside TensorFlow's own package (a broken or blocked
    install).

    Example:
        >>> tensorflow_import_failure(ModuleNotFoundError("No module", name="tensorflow"))
        True
        >>> tensorflow_import_failure(ModuleNotFoundError("No module", name="grain"))
        False
    """
    if not isinstance(error, ImportError):
        return False
    if (error.name or "").split(".")[0] == "tensorflow":
        return True
    tb, last = error.__traceback__, None
    while tb is not None:
        last, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    return last is not None and f"{os.sep}tensorflow{os.sep}" in last


def require_tensorflow(what: str) -> None:
    """Imports TensorFlow, or raises `TensorFlowMissingError` saying that `what` needs it,
    before any work (a builder writes nothing, not even its manifest).

    Example:
        >>> require_tensorflow("writing TFRecords")  # installed here: nothing happens
    """
    try:
        import tensorflow  # noqa: F401
    except ImportError as error:
        if not tensorflow_import_failure(error):
            raise
        raise TensorFlowMissingError(missing_tensorflow_line(what, error)) from None


def missing_tensorflow_line(what: str, error: BaseException) -> str:
    """The line of a failed `import tensorflow` that `what` needed."""
    return (
        f"{what} needs TensorFlow, which cannot be imported here ({error}): install "
        "tensorflow, or on the JAX backend read the records with --data-backend grain"
    )
