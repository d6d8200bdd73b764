"""Value parsers for `argparse` options, shared by the `cvbench` commands and the scripts in
`benchmarks/` and `examples/`: each raises `argparse.ArgumentTypeError` naming the bad value,
which argparse turns into a usage error (exit status 2).
"""

from __future__ import annotations

import argparse
import math

#: The largest seed: NumPy's and TensorFlow's seeds are 32-bit.
MAX_SEED = 2**32 - 1
#: The largest image side a flag takes (`image_side`): `cvbench.utils.model_file`'s bound.
MAX_IMAGE_SIDE = 8192
#: The most worker processes a builder starts (`worker_count`).
MAX_WORKERS = 256
#: The longest network timeout (`timeout_seconds`): a day.
MAX_TIMEOUT_SECONDS = 86400


def positive_int(text: str) -> int:
    """`"8"` -> 8; zero, negatives and non-integers are errors.

    Example:
        >>> positive_int("8")
        8
    """
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """`"0"` -> 0; negatives and non-integers are errors."""
    return _int_at_least(text, 0, "an integer >= 0")


def _int_at_least(text: str, minimum: int, expected: str) -> int:
    """`text` as an int >= `minimum`; the error says what was `expected` and what was given
    (the text when it is no integer, else the value)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def _int_in_range(text: str, minimum: int, maximum: int) -> int:
    """`text` as an int from `minimum` to `maximum`; the error names the range and the value."""
    expected = f"an integer from {minimum} to {maximum}"
    value = _int_at_least(text, minimum, expected)
    if value > maximum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def image_side(text: str) -> int:
    """`"224"` -> 224: an image side in pixels, from 1 to `MAX_IMAGE_SIDE` (8192, the bound of
    a model file's input side and of a run's `--image-size`: one batch of larger images would
    not fit in memory).

    Example:
        >>> image_side("100000")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected an integer from 1 to 8192, got 100000
    """
    return _int_in_range(text, 1, MAX_IMAGE_SIDE)


def worker_count(text: str) -> int:
    """`"8"` -> 8: worker processes of a builder (`--workers`) or threads of a pipeline
    (`bench-input --threads`), from 1 to `MAX_WORKERS` (each worker is a process importing
    cvbench afresh: `--workers 100000` would start as many as the chunks in flight;
    `--threads 100000` grew to 19 GiB in minutes, before any batch).

    Example:
        >>> worker_count("8")
        8
        >>> worker_count("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected an integer from 1 to 256, got 0
    """
    return _int_in_range(text, 1, MAX_WORKERS)


def seed_int(text: str) -> int:
    """`"42"` -> 42; a seed NumPy and TensorFlow take: an integer from 0 to `MAX_SEED`.

    Example:
        >>> seed_int("42")
        42
        >>> seed_int("-1")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected an integer from 0 to 4294967295, got -1
    """
    return _int_in_range(text, 0, MAX_SEED)


def output_path(text: str) -> str:
    """`"runs/a"` -> "runs/a", unchanged; an empty path is an error (`Path("")` is the
    current folder, which a command would write into by mistake: `.` names it).

    Example:
        >>> output_path("runs/a")
        'runs/a'
    """
    if text == "":
        raise argparse.ArgumentTypeError(
            "the path is empty: name the folder to write (. for the current one)"
        )
    return text


def split_name(text: str) -> str:
    """A split name (`--split val`): one plain file-name component, checked by
    `cvbench.data.safe_paths.check_split_name` (no `/`, `..`, control character, ...)."""
    from cvbench.data.safe_paths import check_split_name

    try:
        return check_split_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def non_negative_float(text: str) -> float:
    """`"0.5"` -> 0.5; negatives, NaN, infinity and non-numbers are errors."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def score_threshold(text: str) -> float:
    """`"0.3"` -> 0.3: a detector's score threshold (`--score-threshold`), in `[0, 1)` by the
    rule of the Python API (`cvbench.utils.model_file.check_score_threshold`).

    Example:
        >>> score_threshold("0.3")
        0.3
        >>> score_threshold("nan")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be in [0, 1), got 'nan'
    """
    from cvbench.utils.model_file import check_score_threshold

    try:
        return check_score_threshold(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text!r}") from None


def timeout_seconds(text: str) -> float:
    """`"60"` -> 60.0: a network timeout in seconds, a finite number > 0 and at most
    `MAX_TIMEOUT_SECONDS` (a day: more is a typo, and a socket refuses a timeout past its
    clock's range, `--timeout inf` ended in an `OverflowError`).

    Example:
        >>> timeout_seconds("0.5")
        0.5
        >>> timeout_seconds("inf")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected seconds > 0 and at most 86400 (a day), got 'inf'
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT_SECONDS:  # NaN too
        raise argparse.ArgumentTypeError(
            f"expected seconds > 0 and at most {MAX_TIMEOUT_SECONDS} (a day), got {text!r}"
        )
    return value


def positive_int_list(text: str) -> tuple[int, ...]:
    """`"1,8,64"` -> (1, 8, 64); `""` or `"none"` -> () (an empty list).

    Example:
        >>> positive_int_list("1, 8,64"), positive_int_list("none")
        ((1, 8, 64), ())
    """
    if text.strip().lower() in ("", "none"):
        return ()
    return tuple(positive_int(part.strip()) for part in text.split(","))


def name_list(text: str) -> tuple[str, ...]:
    """`"resnet50,inception_v3"` -> ("resnet50", "inception_v3"); at least one name."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def float_list(text: str) -> tuple[float, ...]:
    """`"30,60,80"` -> (30.0, 60.0, 80.0)."""
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers like 30,60,80, got {text!r}"
        ) from None


def add_max_input_side(parser: argparse.ArgumentParser) -> None:
    """Adds `--max-input-side N` (the largest input side a model file may declare; default
    `cvbench.utils.model_file`'s limit) to a command that reads model files."""
    parser.add_argument(
        "--max-input-side",
        type=positive_int,
        metavar="N",
        default=None,
        help="largest model input side a model file may declare, in pixels (8192)",
    )
