"""The error a bad input file raises, and the one-line description of an `OSError`.

`BadFileError` is a `ValueError` (Python callers that catch `ValueError` keep working) whose
message names the file and what is wrong with it, or the limit it exceeds and how to raise
that limit. The `cvbench` command prints it as one line with exit code 1, like corrupt
records, where a bad argument (a plain `ValueError`) exits with 2.
"""

from __future__ import annotations

import os


class BadFileError(ValueError):
    """An input file that cannot be used: malformed, of another kind, or over a size limit.

    Example:
        >>> str(BadFileError("model.keras: cvbench.json is not an object"))
        'model.keras: cvbench.json is not an object'
        >>> isinstance(BadFileError("x"), ValueError)
        True
    """


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
