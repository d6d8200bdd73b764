"""A folder given as records that holds raw data instead (class folders of images, COCO JSON
and images): the one line that says so and names the builder command that makes its records.

TensorFlow-free (the grain reader and the task layer use it too). Only the first
`LOOK_AT` entries of a folder are looked at, so a huge folder costs no scan.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

#: Extensions of the image files the builders read (any case).
IMAGE_SUFFIXES = frozenset(
    {".jpeg", ".jpg", ".jpe", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm"}
)
#: Entries of a folder looked at.
LOOK_AT = 200


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return [entry for _, entry in zip(range(LOOK_AT), it, strict=False)]
    except OSError:
        return []


def _is_image(entry: os.DirEntry) -> bool:
    return Path(entry.name).suffix.lower() in IMAGE_SUFFIXES and entry.is_file()


def _has_images(folder: Path) -> bool:
    return any(_is_image(e) for e in _entries(folder))


def _has_class_folders(folder: Path) -> bool:
    """Whether a sub-folder of `folder` holds images (`<class>/<image>`)."""
    return any(e.is_dir() and _has_images(Path(e.path)) for e in _entries(folder))


def _records_name(folder: Path) -> str:
    return f"{folder}-records"


def raw_data_message(data_dir: str | os.PathLike) -> str | None:
    """What `data_dir` holds instead of records and the command that builds them, in one
    line; None when it holds no raw images (nor COCO annotations).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "train" / "cat").mkdir(parents=True)
        >>> (root / "train" / "cat" / "1.jpg").write_bytes(b"")
        0
        >>> message = raw_data_message(root).replace(str(root), "RAW")
        >>> print(message)  # doctest: +NORMALIZE_WHITESPACE
        RAW holds images in class folders (RAW/train/<class>/), not TFRecords: build them
        first with `cvbench build-imagenet --raw-dir RAW --output-dir RAW-records`, then pass
        --data-dir RAW-records
        >>> raw_data_message(root / "train" / "cat" / "none") is None
        True
    """
    root = Path(data_dir)
    q = shlex.quote
    out = _records_name(root)
    annotations = sorted((root / "annotations").glob("instances_*.json"))
    jsons = sorted(p for p in root.glob("*.json") if p.is_file())
    if _has_class_folders(root / "train"):
        what = f"images in class folders ({root / 'train'}/<class>/)"
        command = f"cvbench build-imagenet --raw-dir {q(str(root))} --output-dir {q(out)}"
    elif annotations:
        what = f"COCO annotations ({annotations[0]})"
        command = f"cvbench build-coco --coco-dir {q(str(root))} {q(out)}"
    elif jsons and (_has_images(root) or _has_class_folders(root)):
        images = root
        if not _has_images(root):  # the first sub-folder of images
            images = next(
                Path(e.path)
                for e in sorted(_entries(root), key=lambda e: e.name)
                if e.is_dir() and _has_images(Path(e.path))
            )
        what = f"a JSON file ({jsons[0].name}) and images"
        command = (
            f"cvbench build-coco --annotations {q(str(jsons[0]))} --images "
            f"{q(str(images))} --split train {q(out)}"
        )
    elif _has_class_folders(root):
        what = f"images in class folders ({root}/<class>/)"
        if root.name == "train":  # RAW/train given: RAW is what the builder takes
            out = _records_name(root.parent)
            command = (
                f"cvbench build-imagenet --raw-dir {q(str(root.parent))} --output-dir {q(out)}"
            )
        else:
            command = (
                f"cvbench build-imagenet --raw-dir {q(str(root))} --train-dir {q(str(root))} "
                f"--output-dir {q(out)}"
            )
    elif _has_images(root):
        return (
            f"{root} holds images without class folders, not TFRecords: move them into "
            f"{root}/train/<class>/ folders, build the records with `cvbench build-imagenet "
            f"--raw-dir {q(str(root))} --output-dir {q(out)}`, then pass --data-dir {out}"
        )
    else:
        return None
    return (
        f"{root} holds {what}, not TFRecords: build them first with `{command}`, then pass "
        f"--data-dir {out}"
    )
