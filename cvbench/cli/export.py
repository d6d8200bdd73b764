"""`cvbench export`: a serving SavedModel or TFLite file of a `.keras` model file (see
`cvbench.inference.export`).

`--overwrite` replaces only a previous cvbench export (never another folder or file, nor the
current folder, a parent of it, the home folder or `/`), atomically: the old export stays
until the new one is complete. The output is never the model file (nor a folder holding it),
and a read-only destination is found before TensorFlow is imported. A SIGTERM or Ctrl-C
stops it with one line; the half-written export is removed and a previous one is kept.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from cvbench.cli.args import add_max_input_side, positive_int, score_threshold
from cvbench.cli.errors import CLIError
from cvbench.cli.predict import check_flags_fit, with_flag_hints


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `export` subcommand."""
    p = subparsers.add_parser(
        "export",
        help="write a serving SavedModel or TFLite file of a model file",
        description="Exports a cvbench .keras model file for serving: the signature takes "
        "uint8 (B, H, W, 3) images of any size (one per batch), resizes and crops them in "
        "the graph by the model file's rule, and returns probabilities and the top-k "
        "classes with their names (classifiers) or decoded, NMS-ed boxes, scores, classes, "
        "class names and num_detections (SSDs). Batch norms are folded into the convolutions.",
    )
    p.add_argument("model", metavar="MODEL", help="a .keras model file written by cvbench")
    p.add_argument(
        "--format",
        choices=("saved_model", "tflite"),
        default="saved_model",
        help="saved_model (a directory) or tflite (a file); default saved_model",
    )
    p.add_argument("--output", required=True, metavar="PATH", help="directory or file to write")
    p.add_argument(
        "--top-k",
        type=positive_int,
        metavar="K",
        default=None,
        help="classifiers: classes per image, at most the model's class count (default 5, or "
        "every class of a model with fewer)",
    )
    threshold = p.add_mutually_exclusive_group()
    threshold.add_argument(
        "--score-threshold",
        type=score_threshold,
        default=None,
        metavar="T",
        help="detectors: keep boxes scoring above T, in [0, 1) (default 0.5, as predict)",
    )
    threshold.add_argument(
        "--coco-threshold",
        action="store_true",
        help="detectors: the model file's own threshold (COCO evaluation's, 1e-8 for "
        "ssd320: every image returns its max_total boxes)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output that is a previous cvbench export",
    )
    add_max_input_side(p)
    p.set_defaults(func=handler, kept_on_stop=_kept_on_stop)


def _kept_on_stop(args: argparse.Namespace) -> str:
    if os.path.lexists(args.output):
        return f"nothing was written; {args.output} is as it was"
    return "nothing was written"


def _check_backend() -> None:
    """Refuses (exit 2) an export under another Keras backend than TensorFlow: a choice of
    the user's (`--backend`, `KERAS_BACKEND`), told before any work; a `RuntimeError` of the
    export itself is not a usage error."""
    import keras

    if keras.config.backend() != "tensorflow":
        raise CLIError(
            f"export needs the TensorFlow backend (KERAS_BACKEND={keras.config.backend()}); "
            "the .keras file loads on TensorFlow: export it there"
        )


def _threshold(args: argparse.Namespace) -> float | None:
    """`export_for_serving`'s `score_threshold`: `--score-threshold`, else predict's 0.5;
    None (the model file's own) with `--coco-threshold`."""
    from cvbench.inference.detection import SCORE_THRESHOLD

    if args.coco_threshold:
        return None
    return SCORE_THRESHOLD if args.score_threshold is None else args.score_threshold


def handler(args: argparse.Namespace) -> int:
    from cvbench.inference.outputs import check_parent_path, check_replaceable, check_writable
    from cvbench.utils.files import check_output, written_by_cvbench
    from cvbench.utils.model_file import MAX_INPUT_SIDE, info_file_path, require_model_info

    model = Path(args.model)
    if not model.exists():  # a FIFO or folder is refused by read_model_info: exit 1
        raise CLIError(f"no model file {model}")
    if not args.output:
        raise CLIError("--output is empty: name the folder or file to write")
    side = MAX_INPUT_SIDE if args.max_input_side is None else args.max_input_side
    try:
        # Before TensorFlow is imported: refusals take a fraction of a second.
        check_replaceable(
            Path(os.path.abspath(args.output)), overwrite=args.overwrite, label=args.output
        )
        check_output(args.output, inputs=[model], overwrite=True)  # never the model file
        info_file = info_file_path(args.output)  # written beside the export
        check_output(info_file, inputs=[model], overwrite=args.overwrite,
                     is_ours=written_by_cvbench)  # fmt: skip
        check_parent_path(args.output)
        check_writable(args.output)
        info = require_model_info(model, max_input_side=side)
        check_flags_fit(args, info.task, info.num_classes)  # predict's rule
        _check_backend()
        from cvbench.inference import export_for_serving

        written = export_for_serving(
            model,
            args.output,
            format=args.format,
            top_k=5 if args.top_k is None else args.top_k,
            score_threshold=_threshold(args),
            overwrite=args.overwrite,
            max_input_side=side,
        )
    except (FileExistsError, ValueError) as e:
        raise with_flag_hints(e) from None
    print(f"wrote {written} and its info file {info_file}")
    return 0
