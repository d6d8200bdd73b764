"""`cvbench build-coco`: COCO annotation JSON + images -> TF Object Detection API TFRecords.

Two ways to name the input:

    cvbench build-coco OUT --coco-dir /data/coco            # train2017/, val2017/, annotations/
    cvbench build-coco OUT --annotations FILE --images DIR --split val

`--annotations`, `--images` and `--split` may be repeated, once per split and in the same
order, to build a user's own train and val files in one call; or build them call after
call into the same OUT: each call adds its split and keeps the others (`--overwrite`
replaces only the split it names).

The command is thin: it calls `cvbench.data.builders.coco_builder.build_coco_splits` (parallel,
resumable, atomic shards; rerun it after an interruption) and prints the summary: boxes
skipped per reason and images skipped with theirs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cvbench.cli.args import output_path, positive_int, seed_int, split_name, worker_count
from cvbench.cli.errors import CLIError
from cvbench.cli.imagenet import add_max_pixels_argument

_COCO_SPLITS = ("train", "val")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `build-coco` to the `cvbench` command."""
    p = subparsers.add_parser(
        "build-coco",
        help="COCO annotations + images -> TFRecords (TF Object Detection API format)",
        description=(
            "Write coco_train.record-00000-of-00100 ... and coco_val.record-00000-of-00010 "
            "... (TF OD API features, COCO category ids in image/object/class/label). "
            "Boxes with zero size or outside the image, and annotations naming an unknown "
            "category or image, are skipped and counted; unreadable images are skipped and "
            "listed. Parallel and resumable: rerun the same command after an interruption. "
            "Several splits share one OUT, built in one call (repeat --annotations, --images "
            "and --split) or call after call: each call adds its splits and keeps the others, "
            "whose categories must be the same; --overwrite replaces only the splits named."
        ),
    )
    p.add_argument("out", type=output_path, help="output folder")
    _add_source_flags(p)
    _add_shard_flags(p)
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the training shuffle (0)")
    p.add_argument(
        "--quality", type=positive_int, default=95, help="JPEG quality of re-encoded images"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the splits named when OUT holds other versions of them (only their "
        "shards cvbench wrote; other splits are kept)",
    )
    add_max_pixels_argument(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=build_coco_command)


def _add_source_flags(p: argparse.ArgumentParser) -> None:
    """What to read: --coco-dir (and --splits), or --annotations / --images / --split."""
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--coco-dir",
        type=Path,
        help="COCO 2017 folder: annotations/instances_{train,val}2017.json, train2017/, val2017/",
    )
    source.add_argument(
        "--annotations",
        type=Path,
        action="append",
        help="an annotation JSON (with --images and --split); repeat all three, in the same "
        "order, for several splits (train and val)",
    )
    p.add_argument(
        "--images", type=Path, action="append", help="the image folder of each --annotations"
    )
    p.add_argument(
        "--split",
        type=split_name,
        action="append",
        default=None,
        help="the split name of each --annotations (records coco_SPLIT.record-*; `cvbench "
        "train` reads train and val). Other splits already in OUT are kept",
    )
    p.add_argument(
        "--splits",
        nargs="+",
        choices=_COCO_SPLITS,
        default=None,
        help="with --coco-dir: which splits (default: train val)",
    )


def _add_shard_flags(p: argparse.ArgumentParser) -> None:
    """How many shards each split gets, and how many processes encode them."""
    for split, default in (("train", 100), ("val", 10)):
        p.add_argument(
            f"--{split}-shards",
            type=positive_int,
            default=None,
            help=f"with --coco-dir: {split} shards ({default})",
        )
    p.add_argument(
        "--num-shards",
        type=positive_int,
        action="append",
        default=None,
        help="with --annotations: shards (100 for train, else 10; never more than images): once "
        "for every split, or once per --split in the same order",
    )
    p.add_argument(
        "--workers", type=worker_count, default=None, help="encoding processes (all cores)"
    )


def _sources(args: argparse.Namespace) -> tuple[dict, dict]:
    """(split -> (annotation file, image folder), split -> shard count) from the flags."""
    _refuse_other_source_flags(args)
    if args.coco_dir is not None:
        root = args.coco_dir
        sources, shards = {}, {}
        for split in args.splits or _COCO_SPLITS:
            annotations = root / "annotations" / f"instances_{split}2017.json"
            images = root / f"{split}2017"
            for path, kind in ((annotations, "annotation file"), (images, "image folder")):
                if not path.exists():
                    raise CLIError(f"--coco-dir: no {kind} {path} (split {split})")
            sources[split] = (annotations, images)
            count = args.train_shards if split == "train" else args.val_shards
            if count is not None:
                shards[split] = count
        return sources, shards
    files, folders, names = args.annotations, args.images or [], args.split or []
    if len(folders) != len(files) or len(names) != len(files):
        raise CLIError(
            "--annotations needs --images DIR and --split NAME, once per --annotations (got "
            f"{len(files)} --annotations, {len(folders)} --images, {len(names)} --split)"
        )
    counts = args.num_shards or []
    if len(counts) not in (0, 1, len(files)):
        raise CLIError(
            f"--num-shards: give it once, or once per --split ({len(files)}), got {len(counts)}"
        )
    sources, shards = {}, {}
    for index, (annotations, images, split) in enumerate(zip(files, folders, names, strict=True)):
        if split in sources:
            raise CLIError(f"--split {split} is given twice")
        if not annotations.exists():  # a FIFO or device: the builder's one line, exit 1
            raise CLIError(f"--annotations: no such file {annotations}")
        if not images.is_dir():
            raise CLIError(f"--images: no such folder {images}")
        sources[split] = (annotations, images)
        if counts:
            shards[split] = counts[index if len(counts) > 1 else 0]
    return sources, shards


#: The flags of one way of naming the input, each with what the other way uses instead.
_COCO_DIR_FLAGS = {
    "splits": "use --split, once per --annotations",
    "train_shards": "use --num-shards, once or once per --split",
    "val_shards": "use --num-shards, once or once per --split",
}
_ANNOTATIONS_FLAGS = {
    "images": "it reads COCO_DIR/train2017/ and val2017/",
    "split": "use --splits",
    "num_shards": "use --train-shards and --val-shards",
}


def _refuse_other_source_flags(args: argparse.Namespace) -> None:
    """A flag of the other way of naming the input (`--val-shards` with `--annotations`,
    `--split` with `--coco-dir`) is an error naming it and what to use, never ignored."""
    coco_dir = args.coco_dir is not None
    source, owner = ("--coco-dir", "--annotations") if coco_dir else ("--annotations", "--coco-dir")
    other = _ANNOTATIONS_FLAGS if coco_dir else _COCO_DIR_FLAGS
    for name, hint in other.items():
        if getattr(args, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise CLIError(f"{flag} goes with {owner}, not {source}: {hint}")


def build_coco_command(args: argparse.Namespace) -> int:
    """Handler of `cvbench build-coco`."""
    if not 1 <= args.quality <= 100:
        raise CLIError(f"--quality must be in 1..100, got {args.quality}")
    sources, shards = _sources(args)
    from cvbench.data.builders.coco_builder import build_coco_splits

    summary = build_coco_splits(
        args.out,
        sources,
        num_shards=shards,
        num_workers=args.workers,
        seed=args.seed,
        quality=args.quality,
        overwrite=args.overwrite,
        max_pixels=args.max_pixels,
        max_image_bytes=args.max_image_bytes,
        progress=not args.no_progress,
    )
    print(summary.format())
    return 0
