"""Writes the shapes data sets to disk, once: a folder-per-class set and a COCO-format set.

Layouts (the raw inputs of `cvbench build-imagenet` and `cvbench build-coco`):

    classification root/
        train/<class>/<class>_00000.JPEG ...
        val/<class>/<class>_00000.JPEG ...
    detection root/
        <train split>/000000000001.jpg ...
        <val split>/...
        annotations/instances_<split>.json   (COCO: images, annotations, categories)

A set is built in a hidden temporary sibling directory and renamed into place when complete,
with `SHAPES_SPEC.json` (the generator's arguments) inside it. A second call with the same
arguments finds the marker and reuses the set; a call with other arguments rebuilds it. An
interrupted build leaves only the temporary directory, removed by the next call.

Every image is drawn from its own generator seeded by (seed, split, index), so a set is
byte-for-byte reproducible and does not depend on the order images are written in.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from cvbench.demo.shapes import SHAPE_NAMES, classification_example, detection_example
from cvbench.utils.io import write_json_atomic

SPEC_FILE = "SHAPES_SPEC.json"
_SPLIT_IDS = {"train": 0, "val": 1}
_JPEG_QUALITY = 95


@dataclass(frozen=True)
class BuiltSet:
    """Where a data set lives and whether an earlier build was reused."""

    path: Path
    reused: bool


def _rng(seed: int, split: str, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, _SPLIT_IDS[split], index])


def _build_once(root: Path, spec: dict[str, Any], build: Callable[[Path], None]) -> BuiltSet:
    """Runs `build(tmp_dir)` and renames the result to `root`, unless `root` matches `spec`."""
    root = Path(root)
    marker = root / SPEC_FILE
    if root.exists():
        if not marker.is_file():
            raise FileExistsError(
                f"{root} exists but holds no {SPEC_FILE}: not a shapes data set; move it away"
            )
        if json.loads(marker.read_text()) == spec:
            return BuiltSet(root, reused=True)
        shutil.rmtree(root)  # our own set, built with other arguments
    root.parent.mkdir(parents=True, exist_ok=True)
    for stale in root.parent.glob(f".{root.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root.parent / f".{root.name}.tmp-{os.getpid()}"
    tmp.mkdir()
    try:
        build(tmp)
        write_json_atomic(tmp / SPEC_FILE, spec)
        os.rename(tmp, root)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    return BuiltSet(root, reused=False)


def _save_jpeg(image: np.ndarray, path: Path) -> None:
    Image.fromarray(image).save(path, format="JPEG", quality=_JPEG_QUALITY)


def write_classification_set(
    root: str | os.PathLike,
    *,
    image_size: int = 64,
    train_per_class: int = 400,
    val_per_class: int = 50,
    seed: int = 0,
) -> BuiltSet:
    """Writes (or reuses) the folder-per-class shapes set under `root`.

    Each image holds one shape covering 45-80% of it; the classes are `SHAPE_NAMES`, with
    exactly `train_per_class` / `val_per_class` images each.

    Args:
        root: the set's directory (created; its parent must be writable).
        image_size: image height and width in pixels.
        train_per_class: training images per class.
        val_per_class: validation images per class.
        seed: the generator seed.

    Returns:
        The `BuiltSet`.
    """
    if train_per_class < 1 or val_per_class < 1:
        raise ValueError(
            f"need at least one image per class, got train_per_class={train_per_class}, "
            f"val_per_class={val_per_class}"
        )
    spec = {
        "kind": "classification",
        "image_size": image_size,
        "train_per_class": train_per_class,
        "val_per_class": val_per_class,
        "seed": seed,
        "classes": list(SHAPE_NAMES),
    }

    def build(tmp: Path) -> None:
        for split, per_class in (("train", train_per_class), ("val", val_per_class)):
            for name in SHAPE_NAMES:
                (tmp / split / name).mkdir(parents=True)
            for i in range(per_class * len(SHAPE_NAMES)):
                label, k = i % len(SHAPE_NAMES), i // len(SHAPE_NAMES)
                image, _ = classification_example(_rng(seed, split, i), label, image_size)
                name = SHAPE_NAMES[label]
                _save_jpeg(image, tmp / split / name / f"{name}_{k:05d}.JPEG")

    return _build_once(Path(root), spec, build)


def coco_categories() -> list[dict[str, Any]]:
    """COCO `categories` of the shapes set: id = class index + 1 (0 stays background)."""
    return [{"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(SHAPE_NAMES)]


def _coco_split(
    image_dir: Path, split: str, num_images: int, image_size: int, seed: int, **kwargs: Any
) -> dict[str, Any]:
    images, annotations = [], []
    for i in range(num_images):
        image, shapes = detection_example(_rng(seed, split, i), image_size, **kwargs)
        image_id = i + 1
        file_name = f"{image_id:012d}.jpg"
        _save_jpeg(image, image_dir / file_name)
        images.append(
            {"id": image_id, "file_name": file_name, "width": image_size, "height": image_size}
        )
        for s in shapes:
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": s.label + 1,
                    "bbox": [round(v, 2) for v in s.bbox],
                    "area": round(s.area, 2),
                    "segmentation": [[round(float(v), 2) for v in s.polygon.reshape(-1)]],
                    "iscrowd": 0,
                }
            )
    return {
        "info": {"description": f"cvbench synthetic shapes ({split})", "version": "1.0"},
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": coco_categories(),
    }


def write_detection_set(
    root: str | os.PathLike,
    *,
    image_size: int = 128,
    num_train: int = 1500,
    num_val: int = 200,
    max_objects: int = 4,
    min_size: float = 0.2,
    max_size: float = 0.5,
    seed: int = 1,
    split_names: tuple[str, str] = ("train", "val"),
) -> BuiltSet:
    """Writes (or reuses) the COCO-format shapes detection set under `root`.

    Args:
        root: the set's directory.
        image_size: image height and width in pixels.
        num_train: training images.
        num_val: validation images.
        max_objects: the most shapes per image (each image has 1..max_objects).
        min_size: smallest shape, as a fraction of `image_size`.
        max_size: largest shape, as a fraction of `image_size`.
        seed: the generator seed.
        split_names: folder / annotation-file names of the (train, val) splits, e.g.
            ("train2017", "val2017") to mirror COCO 2017.

    Returns:
        The `BuiltSet`.
    """
    if num_train < 1 or num_val < 1:
        raise ValueError(f"need images in both splits, got {num_train=}, {num_val=}")
    if len(split_names) != 2 or split_names[0] == split_names[1]:
        raise ValueError(f"split_names must be two distinct names, got {split_names!r}")
    spec = {
        "kind": "detection",
        "image_size": image_size,
        "num_train": num_train,
        "num_val": num_val,
        "max_objects": max_objects,
        "min_size": min_size,
        "max_size": max_size,
        "seed": seed,
        "split_names": list(split_names),
        "classes": list(SHAPE_NAMES),
    }
    kwargs = {"max_objects": max_objects, "min_size": min_size, "max_size": max_size}

    def build(tmp: Path) -> None:
        (tmp / "annotations").mkdir()
        for split, name, count in (
            ("train", split_names[0], num_train),
            ("val", split_names[1], num_val),
        ):
            (tmp / name).mkdir()
            coco = _coco_split(tmp / name, split, count, image_size, seed, **kwargs)
            write_json_atomic(tmp / "annotations" / f"instances_{name}.json", coco)

    return _build_once(Path(root), spec, build)
