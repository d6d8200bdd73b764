"""`cvbench predict MODEL INPUT...`: classify or detect images with a `.keras` model file.

The model file's `ModelInfo` says what it is: a classifier prints its top-k classes per image
(`--top-k`), an SSD its boxes above `--score-threshold` in original-image pixels
(`--box-format`, default `xyxy`). `--json` prints one JSON object per image instead of the
table (the `to_dict` of `cvbench.inference.Classification` / `Detection`); `--coco-json FILE`
writes the detections as a COCO results file; `--draw DIR` writes a PNG per image with the
labelled boxes or the top-k caption.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cvbench.cli import CLIError
from cvbench.cli.args import positive_int

_BOX_FORMATS = ("xyxy", "xywh", "yxyx")


def _score_threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text!r}")
    return value


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
        type=_score_threshold,
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
        "--batch-size", type=positive_int, metavar="N", default=8, help="images per model call (8)"
    )
    p.set_defaults(func=handler)


def _check_flags(args: argparse.Namespace, task: str) -> None:
    if task == "classification":
        wrong = [
            flag
            for flag, value in (
                ("--score-threshold", args.score_threshold),
                ("--coco-json", args.coco_json),
            )
            if value is not None
        ]
        if args.box_format != "xyxy":
            wrong.append("--box-format")
    else:
        wrong = ["--top-k"] if args.top_k is not None else []
    if wrong:
        kind = "classifier" if task == "classification" else "detector"
        raise CLIError(f"{args.model} is a {kind}: {', '.join(wrong)} does not apply to it")


def _print_table(results: list[Any], task: str) -> None:
    for r in results:
        if task == "classification":
            top = " | ".join(
                f"{name} {score:.3f}" for name, score in zip(r.class_names, r.scores, strict=True)
            )
            print(f"{r.source}  {top}")
            continue
        print(f"{r.source}: {len(r.scores)} detection(s), boxes {r.box_format} in pixels")
        for box, name, score in zip(r.boxes, r.class_names, r.scores, strict=True):
            coords = ", ".join(f"{v:.1f}" for v in box)
            print(f"  {name:<16} {score:.3f}  [{coords}]")


def handler(args: argparse.Namespace) -> int:
    from cvbench.inference.classification import classify
    from cvbench.inference.coco_results import write_coco_results
    from cvbench.inference.detection import SCORE_THRESHOLD, detect
    from cvbench.inference.draw import draw_results
    from cvbench.utils.model_file import load_model

    model_path = Path(args.model)
    if not model_path.is_file():
        raise CLIError(f"no model file {model_path}")
    model, info = load_model(model_path)
    if info is None:
        raise CLIError(
            f"{model_path} carries no ModelInfo (no cvbench.json entry); write it with "
            "cvbench.inference.save_model(model, path, info)"
        )
    _check_flags(args, info.task)
    if info.task == "classification":
        top_k = 5 if args.top_k is None else args.top_k
        results = classify(model, args.inputs, info=info, top_k=top_k, batch_size=args.batch_size)
    else:
        threshold = SCORE_THRESHOLD if args.score_threshold is None else args.score_threshold
        results = detect(
            model,
            args.inputs,
            info=info,
            score_threshold=threshold,
            box_format=args.box_format,
            batch_size=args.batch_size,
        )
    if args.json:
        for r in results:
            print(json.dumps(r.to_dict()))
    else:
        _print_table(results, info.task)
    if args.coco_json is not None:
        write_coco_results(results, args.coco_json, class_names=info.class_names)
    if args.draw is not None:
        draw_results(results, args.inputs, args.draw)
    return 0
