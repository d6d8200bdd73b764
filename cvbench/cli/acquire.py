"""`cvbench download-coco` and `cvbench extract-imagenet`: get the raw data sets onto disk.

Both commands are thin: they parse flags and call
`cvbench.data.acquire.coco_download.download_coco` and
`cvbench.data.acquire.extract_imagenet.extract_imagenet`; both can be rerun after an interruption.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cvbench.cli.args import timeout_seconds, worker_count
from cvbench.cli.errors import CLIError

_COCO_PARTS = ("annotations", "val", "train")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `download-coco` and `extract-imagenet` to the `cvbench` command."""
    _register_download_coco(subparsers)
    _register_extract_imagenet(subparsers)


def _register_download_coco(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "download-coco",
        help="download, verify and unpack COCO 2017 (resumable)",
        description=(
            "Download the COCO 2017 images and annotations (about 19 GB), resuming partial "
            "files, verifying size and MD5, unpacking into DIR/train2017, DIR/val2017 and "
            "DIR/annotations. Rerun it after an interruption: it continues where it stopped."
        ),
    )
    p.add_argument("dir", type=Path, help="destination folder")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=_COCO_PARTS,
        default=list(_COCO_PARTS),
        help="what to fetch (default: all three)",
    )
    p.add_argument(
        "--base-url",
        default=None,
        help="mirror with the official paths (default: $CVBENCH_COCO_BASE_URL, else "
        "http://images.cocodataset.org)",
    )
    p.add_argument(
        "--delete-archives", action="store_true", help="delete each zip once it is unpacked"
    )
    p.add_argument(
        "--retries", type=int, default=5, help="attempts per file, resumes included (default 5)"
    )
    p.add_argument(
        "--timeout", type=timeout_seconds, default=60.0, help="seconds without data before retrying"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--build-tfrecords",
        metavar="OUT",
        type=Path,
        default=None,
        help="then build the COCO TFRecords (TF Object Detection API format) into OUT",
    )
    p.add_argument(
        "--workers",
        type=worker_count,
        default=None,
        help="with --build-tfrecords: encoding processes (default: all cores)",
    )
    p.set_defaults(func=download_coco_command)


def _register_extract_imagenet(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "extract-imagenet",
        help="lay out the official ILSVRC2012 archives for build-imagenet (rerunnable)",
        description=(
            "Unpack ILSVRC2012_img_train.tar (one tar per class) into OUT/train/<synset>/ and "
            "ILSVRC2012_img_val.tar into OUT/val/<synset>/, streaming (no second copy on disk). "
            "Validation labels come from the devkit (needs scipy) or --val-labels. "
            "See docs/getting_data.md for how to obtain the archives."
        ),
    )
    p.add_argument("out", type=Path, help="destination folder")
    p.add_argument(
        "--archives",
        type=Path,
        default=None,
        help="folder holding the archives under their official names (fills in the three "
        "options below where they are not given)",
    )
    p.add_argument("--train-tar", type=Path, default=None, help="ILSVRC2012_img_train.tar")
    p.add_argument("--val-tar", type=Path, default=None, help="ILSVRC2012_img_val.tar")
    p.add_argument("--devkit", type=Path, default=None, help="ILSVRC2012_devkit_t12.tar.gz")
    p.add_argument(
        "--val-labels",
        type=Path,
        default=None,
        help="instead of the devkit: one WNID per validation image in order, or Kaggle's "
        "LOC_val_solution.csv",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=extract_imagenet_command)


def download_coco_command(args: argparse.Namespace) -> int:
    """Handler of `cvbench download-coco`."""
    from cvbench.data.acquire.coco_download import download_coco

    if args.retries < 1:
        raise CLIError(f"--retries must be >= 1, got {args.retries}")
    if args.timeout <= 0:
        raise CLIError(f"--timeout must be > 0, got {args.timeout}")
    if args.build_tfrecords is not None and (
        "annotations" not in args.parts or not {"train", "val"} & set(args.parts)
    ):
        raise CLIError("--build-tfrecords needs 'annotations' and 'train' or 'val' in --parts")
    # A download that still fails after its retries is a DownloadError (a run-time failure:
    # exit 1, its line naming the URL), never a usage error.
    layout = download_coco(
        args.dir,
        parts=args.parts,
        base_url=args.base_url,
        keep_archives=not args.delete_archives,
        max_attempts=args.retries,
        timeout=args.timeout,
        progress=not args.no_progress,
    )
    print(f"COCO 2017 ready in {layout.root}")
    if args.build_tfrecords is not None:
        _build_coco_tfrecords(layout, args, not args.no_progress)
    return 0


def _build_coco_tfrecords(layout, args: argparse.Namespace, progress: bool) -> None:
    from cvbench.data.builders.coco_builder import (
        build_coco_splits,  # TensorFlow: imported only if asked
    )

    sources = {
        split: (annotations, images)
        for split, annotations, images in (
            ("train", layout.train_annotations, layout.train_images),
            ("val", layout.val_annotations, layout.val_images),
        )
        if split in args.parts
    }
    # A full disk is an OSError: one line, exit status 1.
    summary = build_coco_splits(
        args.build_tfrecords, sources, num_workers=args.workers, progress=progress
    )
    print(summary.format())
    print(f"COCO TFRecords ({', '.join(sources)}) written to {args.build_tfrecords}")


def extract_imagenet_command(args: argparse.Namespace) -> int:
    """Handler of `cvbench extract-imagenet`."""
    from cvbench.data.acquire.extract_imagenet import DEVKIT, TRAIN_TAR, VAL_TAR, extract_imagenet

    train_tar, val_tar, devkit = args.train_tar, args.val_tar, args.devkit
    if args.archives is not None:
        if not args.archives.is_dir():
            raise CLIError(f"--archives: no such folder: {args.archives}")
        found = {name: args.archives / name for name in (TRAIN_TAR, VAL_TAR, DEVKIT)}
        found = {name: path for name, path in found.items() if path.is_file()}
        train_tar = train_tar or found.get(TRAIN_TAR)
        val_tar = val_tar or found.get(VAL_TAR)
        if args.val_labels is None:
            devkit = devkit or found.get(DEVKIT)
    if train_tar is None and val_tar is None:
        raise CLIError(
            f"nothing to extract: give --train-tar/--val-tar, or --archives with {TRAIN_TAR} "
            f"or {VAL_TAR} in it"
        )
    stats = extract_imagenet(
        args.out,
        train_tar=train_tar,
        val_tar=val_tar,
        devkit=devkit,
        val_labels=args.val_labels,
        progress=not args.no_progress,
    )
    for split, s in stats.items():
        if split == "train":
            print(
                f"train: {s.classes_written} classes ({s.written} images) extracted, "
                f"{s.classes_skipped} already done"
            )
        else:
            print(f"val: {s.written} images extracted, {s.skipped} already in place")
    print(f"ImageNet laid out in {args.out} (train/<synset>/, val/<synset>/)")
    return 0
