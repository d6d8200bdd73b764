"""`cvbench predict MODEL INPUT...`: classify or detect images with a `.keras` model file.

The model file's `ModelInfo` says what it is: a classifier prints its top-k classes per image
(`--top-k`), an SSD its boxes above `--score-threshold` in original-image pixels
(`--box-format`, default `xyxy`). `--json` prints one JSON object per image instead of the
table (the `to_dict` of `cvbench.inference.Classification` / `Detection`); `--coco-json FILE`
writes the detections as a COCO results file; `--draw DIR` writes a PNG per image with the
labelled boxes or the top-k caption.

Nothing is predicted before the outputs are checked: a drawing or results file never replaces
an input image or the model file, nor an existing file without `--overwrite`, and
`--overwrite` replaces only files cvbench wrote (`cvbench.utils.files.written_by_cvbench`);
a folder that cannot be written (read-only, no permission) is found before predicting too.
An image file that cannot be read or is over `--max-image-pixels` stops the run with one line
naming it (exit 1, nothing written), or with `--skip-corrupt` is skipped with one warning line
each and counted at the end (on stderr, so that `--json` output stays JSON lines); when every
image is skipped the run stops with one line (exit 1) and writes nothing. A score or box that
is not finite is `null` in the JSON. File names are printed with their control characters
escaped (`a\\nb.png`), so that a name cannot forge a line of the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cvbench.cli.args import add_max_input_side, positive_int, score_threshold
from cvbench.cli.errors import CLIError, for_command_line
from cvbench.utils.errors import BadFileError, CvbenchError

_BOX_FORMATS = ("xyxy", "xywh", "yxyx")
#: Hints of the Python API's messages and the flags that say the same to `predict` / `export`.
_FLAG_HINTS = (
    ("pass overwrite=True", "pass --overwrite"),
    ("pass max_image_pixels=N", "pass --max-image-pixels N"),
    ("pass max_input_side=N", "pass --max-input-side N"),
)


def with_flag_hints(error: ValueError) -> Exception:
    """The error to raise for a `ValueError` of the Python API, its hints naming flags:
    cvbench's own errors keep their class and so their exit code (a `BadFileError` stays
    exit 1), anything else becomes a `CLIError` (exit 2).

    Example:
        >>> str(with_flag_hints(ValueError("out exists; pass overwrite=True to replace it")))
        'out exists; pass --overwrite to replace it'
        >>> error = with_flag_hints(BadFileError("m.keras: pass overwrite=True"))
        >>> type(error).__name__, error.exit_code, str(error)
        ('BadFileError', 1, 'm.keras: pass --overwrite')
    """
    message = str(error)
    for api, flag in _FLAG_HINTS:
        message = message.replace(api, flag)
    if isinstance(error, CvbenchError):
        error.args = (message,)
        return error
    return CLIError(message)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `predict` subcommand."""
    p = subparsers.add_parser(
        "predict",
        help="classify or detect images with a trained .keras model",
        description="Runs a classifier (top-k classes) or an SSD (boxes in pixels of each "
        "image) from a .keras file written by cvbench on image files and folders (their "
        "images, sorted). Prints a table, or one JSON object per image with --json.",
    )
    p.add_argument("model", metavar="MODEL", help="the .keras model file (with its ModelInfo)")
    p.add_argument("inputs", metavar="INPUT", nargs="+", help="image files, or folders of images")
    p.add_argument(
        "--top-k",
        type=positive_int,
        metavar="K",
        default=None,
        help="classifiers: classes per image (5)",
    )
    p.add_argument(
        "--score-threshold",
        type=score_threshold,
        metavar="T",
        default=None,
        help="detectors: keep boxes scoring above it, in [0, 1) (0.5)",
    )
    p.add_argument(
        "--box-format",
        choices=_BOX_FORMATS,
        default="xyxy",
        help="detectors: pixel box format, xyxy = [xmin, ymin, xmax, ymax] (default), xywh = "
        "COCO [x, y, width, height], yxyx = [ymin, xmin, ymax, xmax]",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per image")
    p.add_argument(
        "--coco-json", metavar="FILE", default=None, help="detectors: write COCO results JSON"
    )
    p.add_argument("--draw", metavar="DIR", default=None, help="write annotated PNGs into DIR")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace existing files of --draw and --coco-json (never an input image)",
    )
    p.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip image files that cannot be read or are too large, with a warning each",
    )
    p.add_argument(
        "--max-image-pixels",
        type=positive_int,
        metavar="N",
        default=None,
        help="largest image read, width x height (64000000)",
    )
    add_max_input_side(p)
    p.add_argument(
        "--batch-size", type=positive_int, metavar="N", default=8, help="images per model call (8)"
    )
    p.set_defaults(func=handler, kept_on_stop=_kept_on_stop)


def _kept_on_stop(args: argparse.Namespace) -> str:
    if args.draw is None and args.coco_json is None:
        return "nothing was written"
    return "the files written so far are kept; none is half-written"


#: The flags that fit one kind of model file only (`ModelInfo.task`), each with the `args`
#: attribute it sets and its value when not given; `check_flags_fit` refuses one given for
#: the other kind, in `predict` and `export` alike (a command has the flags of its parser).
_KIND_FLAGS = {
    "classification": (("--top-k", "top_k", None),),
    "detection": (
        ("--score-threshold", "score_threshold", None),
        ("--coco-threshold", "coco_threshold", False),
        ("--coco-json", "coco_json", None),
        ("--box-format", "box_format", "xyxy"),
    ),
}


def check_flags_fit(args: argparse.Namespace, task: str, num_classes: int) -> None:
    """Refuses, before the model is loaded, the flags that do not fit the model file
    `args.model` of kind `task` (`ModelInfo.task`): a flag of the other kind, and a
    `--top-k` over a classifier's `num_classes` (the user asked for more classes than
    the model has: a wrong model file or a typo; an export's `(B, k)` outputs would be
    narrower than asked). The default top-k (5) is cut to the class count silently.

    Raises:
        CLIError: naming the flags (exit 2).

    Example:
        >>> args = argparse.Namespace(model="m.keras", top_k=10)
        >>> check_flags_fit(args, "classification", 3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cvbench.cli.errors.CLIError: --top-k 10: m.keras is a classifier of 3 classes; pass...
    """
    wrong = [
        flag
        for other, flags in _KIND_FLAGS.items()
        if other != task
        for flag, dest, unset in flags
        if getattr(args, dest, unset) != unset
    ]
    if wrong:
        noun = _KINDS[task].noun
        raise CLIError(f"{args.model} is a {noun}: {', '.join(wrong)} does not apply to it")
    top_k = getattr(args, "top_k", None)
    if task == "classification" and top_k is not None and top_k > num_classes:
        raise CLIError(
            f"--top-k {top_k}: {args.model} is a classifier of {num_classes} classes; pass "
            f"--top-k {num_classes} or less"
        )


def _classify(
    model: Any, files: list[str], info: Any, args: argparse.Namespace, reading: dict
) -> list:
    from cvbench.inference import classify

    top_k = 5 if args.top_k is None else args.top_k
    return classify(model, files, info=info, top_k=top_k, **reading)


def _detect(
    model: Any, files: list[str], info: Any, args: argparse.Namespace, reading: dict
) -> list:
    from cvbench.inference import detect
    from cvbench.inference.detection import SCORE_THRESHOLD

    threshold = SCORE_THRESHOLD if args.score_threshold is None else args.score_threshold
    return detect(
        model, files, info=info, score_threshold=threshold, box_format=args.box_format, **reading
    )


def _classification_lines(r: Any, source: str) -> list[str]:
    top = " | ".join(
        f"{name} {score:.3f}" for name, score in zip(r.class_names, r.scores, strict=True)
    )
    return [f"{source}  {top or 'no class (the model output NaN or infinite logits)'}"]


def _detection_lines(r: Any, source: str) -> list[str]:
    lines = [f"{source}: {len(r.scores)} detection(s), boxes {r.box_format} in pixels"]
    for box, name, score in zip(r.boxes, r.class_names, r.scores, strict=True):
        coords = ", ".join(f"{v:.1f}" for v in box)
        lines.append(f"  {name:<16} {score:.3f}  [{coords}]")
    return lines


@dataclass(frozen=True)
class _Kind:
    """What `cvbench predict` does for one kind of model file (`ModelInfo.task`).

    Attributes:
        noun: what such a model is called in messages ("classifier").
        predict: `(model, files, info, args, reading) -> results` (`reading`: the keyword
            arguments of the image reading both kinds share).
        lines: the table lines of one result, given its printable source name.
    """

    noun: str
    predict: Callable[..., list]
    lines: Callable[[Any, str], list[str]]


#: `cvbench predict` by the model file's kind (`ModelInfo.task`): the one place that tells the
#: kinds apart.
_KINDS = {
    "classification": _Kind("classifier", _classify, _classification_lines),
    "detection": _Kind("detector", _detect, _detection_lines),
}


def _print_table(results: list[Any], kind: _Kind) -> None:
    from cvbench.utils.errors import printable  # a name cannot forge a line

    for r in results:
        for line in kind.lines(r, printable(str(r.source))):
            print(line)


def _check_outputs(args: argparse.Namespace, inputs: list[Path]) -> None:
    """Refuses, before anything is loaded or predicted, outputs that would replace an input
    image or the model file, an existing file without --overwrite, a file cvbench did not
    write (--overwrite replaces only its own), or that a file or a read-only folder stands in
    the way of."""
    from cvbench.inference.draw import check_drawing_paths, drawing_paths
    from cvbench.inference.outputs import check_folder_path, check_output_files, check_writable

    for flag, value in (("--draw", args.draw), ("--coco-json", args.coco_json)):
        if value == "":
            raise CLIError(f"{flag} is empty: name the {'folder' if flag == '--draw' else 'file'}")
    if args.draw is not None:
        check_folder_path(args.draw)
        paths = drawing_paths([str(p) for p in inputs], args.draw)
        check_drawing_paths(paths, input_files=inputs, overwrite=args.overwrite)
        for path in paths:
            _check_replaced(path, args)
        check_writable(args.draw, folder=True)
    if args.coco_json is not None:
        from cvbench.inference.coco_results import image_ids_from_names

        image_ids_from_names([str(p) for p in inputs])  # two files of one id: before predicting
        check_output_files(
            [args.coco_json], input_files=inputs, overwrite=args.overwrite, what="--coco-json file"
        )
        _check_replaced(Path(args.coco_json), args)
        check_writable(args.coco_json)


def _check_replaced(path: Path, args: argparse.Namespace) -> None:
    """`check_output`: `path` is not the model file (the input images are
    `check_output_files`'), and replaces only a file cvbench wrote."""
    from cvbench.utils.files import check_output, written_by_cvbench

    check_output(
        path,
        inputs=[Path(args.model)],
        overwrite=args.overwrite,
        is_ours=written_by_cvbench,
    )


def handler(args: argparse.Namespace) -> int:
    try:
        return _predict(args)
    except FileExistsError as e:
        if e.errno is not None:  # from the disk: one line naming the path, exit 1
            raise
        raise with_flag_hints(e) from None
    except ValueError as e:
        raise with_flag_hints(e) from None


def _predict(args: argparse.Namespace) -> int:
    # The model file's info and the outputs are checked before Keras is imported.
    from cvbench.inference.images import MAX_IMAGE_PIXELS, batch_size_within, image_paths

    info = _model_info(args)
    kind = _KINDS[info.task]
    check_flags_fit(args, info.task, info.num_classes)
    max_image_pixels = args.max_image_pixels or MAX_IMAGE_PIXELS
    inputs = image_paths(args.inputs)
    _check_outputs(args, inputs)

    from cvbench.inference import load_model

    # load_model checks the info's image_size against the model's input
    model, info = load_model(Path(args.model), max_input_side=_max_input_side(args))
    # A model whose input alone is over the pixel budget: refused before any image is read.
    batch_size_within(
        info, args.batch_size, max_image_pixels=max_image_pixels, model=Path(args.model)
    )
    files = [str(p) for p in inputs]
    skipped: list[BadFileError] = []
    reading = {
        "batch_size": args.batch_size,
        "skip_corrupt": args.skip_corrupt,
        "on_skip": lambda error: _warn_skipped(error, skipped),
        "max_image_pixels": max_image_pixels,
    }
    results = kind.predict(model, files, info, args, reading)
    if files and len(skipped) == len(files):
        n = len(files)
        raise BadFileError(
            f"all {n} image file{'s' * (n != 1)} were skipped (--skip-corrupt): nothing was "
            "predicted and no output was written"
        )
    _write_results(args, results, files, info, kind, max_image_pixels=max_image_pixels)
    if skipped:
        n = len(skipped)
        print(
            f"cvbench predict: skipped {n} bad image file{'s' * (n != 1)} of {len(files)} "
            "(--skip-corrupt)",
            file=sys.stderr,
        )
    return 0


def _max_input_side(args: argparse.Namespace) -> int:
    from cvbench.utils.model_file import MAX_INPUT_SIDE

    return MAX_INPUT_SIDE if args.max_input_side is None else args.max_input_side


def _model_info(args: argparse.Namespace) -> Any:
    """The `ModelInfo` of the model file, read without Keras; one without is refused."""
    from cvbench.utils.model_file import require_model_info

    model_path = Path(args.model)
    if not model_path.exists():  # a FIFO or folder is refused by read_model_info: exit 1
        raise CLIError(f"no model file {model_path}")
    return require_model_info(model_path, max_input_side=_max_input_side(args))


def _warn_skipped(error: BadFileError, skipped: list[BadFileError]) -> None:
    """Counts an image file --skip-corrupt skipped and prints its one warning line."""
    from cvbench.utils.errors import printable

    skipped.append(error)
    line = printable(for_command_line(str(error)))
    print(f"cvbench predict: warning: skipped {line}", file=sys.stderr)


def _write_results(
    args: argparse.Namespace,
    results: list,
    files: list[str],
    info: Any,
    kind: _Kind,
    *,
    max_image_pixels: int,
) -> None:
    """Prints the results (the table, or JSON lines with --json), then writes --coco-json
    and --draw, recording each file as it is written (`recording`), so that a
    run stopped part-way leaves only files a rerun with --overwrite may replace."""
    from cvbench.inference import draw_results, write_coco_results
    from cvbench.utils.files import recording

    if args.json:
        for r in results:
            print(json.dumps(r.to_dict(), allow_nan=False))
    else:
        _print_table(results, kind)
    if args.coco_json is not None:
        with recording(args.coco_json):
            write_coco_results(results, args.coco_json, class_names=info.class_names)
    if args.draw is not None:
        draw_results(
            results, files, args.draw, overwrite=args.overwrite,
            max_image_pixels=max_image_pixels, record_outputs=True,
        )  # fmt: skip
