"""`build_coco` / `build_coco_splits`: COCO annotations + images -> TFRecords (TF OD API format).

Input: a COCO annotation JSON (`instances_train2017.json`) and its image folder
(`train2017/`). Output: `coco_train.record-00000-of-00100` … (100 shards) or
`coco_val.record-00000-of-00010` … (10 shards), one `tf.train.Example` per image, in the
layout `cvbench.data.coco_schema` defines (and `coco_schema.coco_example` writes).

Annotations are checked before anything is written. Skipped and counted (the OD API rules):
boxes with zero width or height, boxes outside the image (x < 0, y < 0, x + w > width or
y + h > height); also annotations naming an unknown category or image, and malformed ones.
Images without boxes are kept (COCOeval counts them) and counted.

Beside the records goes `dataset_info.json` (`cvbench.data.dataset_info`): the categories of
the annotation files in id order with their names (class index = rank of the id), the images
per category and split, the JPEG quality.

The module is named `coco_builder`, not after its function `build_coco`, so that
`cvbench.data.build_coco` is always the function (a package attribute named like a submodule
is replaced by the submodule once that is imported).
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import functools
import json
import math
import os
import random
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cvbench.data.coco_schema import SHARD_PATTERN, CocoImage, CocoObject, coco_example
from cvbench.data.dataset_info import (
    ClassInfo,
    DatasetInfo,
    dataset_info_path,
    write_dataset_info,
)
from cvbench.data.image_io import ImageError, to_rgb_jpeg
from cvbench.data.sharded_writer import (
    DiskFullError,
    Skip,
    SplitSpec,
    WriteSummary,
    disk_full_as_error,
    write_sharded,
)
from cvbench.utils.io import atomic_path

#: Shard counts of the reference layout; other split names default to 10.
DEFAULT_SHARDS: dict[str, int] = {"train": 100, "val": 10}

SKIP_REASONS: tuple[str, ...] = (
    "zero_size",
    "outside_image",
    "unknown_category",
    "unknown_image",
    "malformed",
)


@dataclasses.dataclass
class AnnotationReport:
    """What parsing kept and skipped.

    Attributes:
        num_images: images in the file.
        num_annotations: annotations in the file.
        num_boxes: annotations kept.
        images_without_boxes: images left with no kept box (still written).
        skipped: reason -> count, reasons from `SKIP_REASONS`.
        examples: reason -> the first few annotation ids skipped for it.
        categories: category id -> name, from the file's `categories`, in file order.
    """

    num_images: int = 0
    num_annotations: int = 0
    num_boxes: int = 0
    images_without_boxes: int = 0
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    examples: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    categories: dict[int, str] = dataclasses.field(default_factory=dict)

    def skip(self, reason: str, ann_id: Any) -> None:
        self.skipped[reason] += 1
        ids = self.examples.setdefault(reason, [])
        if len(ids) < 5:
            ids.append(ann_id)

    def summary(self) -> str:
        """A few human-readable lines."""
        lines = [
            f"{self.num_images} images, {self.num_annotations} annotations: "
            f"{self.num_boxes} boxes kept, {self.images_without_boxes} images without boxes"
        ]
        for reason in SKIP_REASONS:
            if self.skipped[reason]:
                lines.append(
                    f"  skipped {self.skipped[reason]} annotations ({reason}), "
                    f"e.g. ids {self.examples[reason]}"
                )
        return "\n".join(lines)


def parse_coco_annotations(data: Mapping[str, Any]) -> tuple[list[CocoImage], AnnotationReport]:
    """Checks a COCO annotation dict and returns its images with their valid boxes.

    Args:
        data: the loaded annotation JSON (`images`, `annotations`, `categories`; a file with
            only `images`, such as `image_info_test2017.json`, gives images without boxes).

    Returns:
        The images in file order, each with its kept objects in file order, and the report.

    Raises:
        ValueError: on a structurally broken file: a missing `images` list, an image without
            `id`/`file_name`/`height`/`width` or with a non-positive size, duplicate image or
            category ids.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("images"), list):
        raise ValueError("not a COCO annotation file: no 'images' list")
    categories: dict[int, str] = {}
    for cat in data.get("categories", []):
        cat_id = int(cat["id"])
        if cat_id in categories:
            raise ValueError(f"duplicate category id {cat_id} in 'categories'")
        categories[cat_id] = str(cat.get("name", cat_id))

    report = AnnotationReport(num_images=len(data["images"]), categories=dict(categories))
    sizes: dict[int, tuple[str, int, int]] = {}
    for img in data["images"]:
        try:
            image_id, name = int(img["id"]), str(img["file_name"])
            height, width = int(img["height"]), int(img["width"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed image entry {img!r}: {e!r}") from None
        if image_id in sizes:
            raise ValueError(f"duplicate image id {image_id} in 'images'")
        if height <= 0 or width <= 0:
            raise ValueError(f"image {image_id} ({name}) has size {height}x{width}")
        sizes[image_id] = (name, height, width)

    objects: dict[int, list[CocoObject]] = {i: [] for i in sizes}
    annotations = data.get("annotations", [])
    report.num_annotations = len(annotations)
    for ann in annotations:
        reason, obj = _check_annotation(ann, sizes, categories)
        if reason:
            report.skip(reason, ann.get("id") if isinstance(ann, Mapping) else None)
        else:
            objects[int(ann["image_id"])].append(obj)
            report.num_boxes += 1

    images = [
        CocoImage(image_id, name, height, width, tuple(objects[image_id]))
        for image_id, (name, height, width) in sizes.items()
    ]
    report.images_without_boxes = sum(1 for im in images if not im.objects)
    return images, report


def _check_annotation(
    ann: Any, sizes: Mapping[int, tuple[str, int, int]], categories: Mapping[int, str]
) -> tuple[str | None, CocoObject | None]:
    """(skip reason, None) or (None, the object) for one annotation."""
    try:
        image_id, cat_id = int(ann["image_id"]), int(ann["category_id"])
        x, y, w, h = (float(v) for v in ann["bbox"])
    except (KeyError, TypeError, ValueError):
        return "malformed", None
    if not all(math.isfinite(v) for v in (x, y, w, h)):
        return "malformed", None
    if image_id not in sizes:
        return "unknown_image", None
    if cat_id not in categories:
        return "unknown_category", None
    _, height, width = sizes[image_id]
    if w <= 0 or h <= 0:
        return "zero_size", None
    if x < 0 or y < 0 or x + w > width or y + h > height:
        return "outside_image", None
    try:
        area = float(ann.get("area", w * h))
    except (TypeError, ValueError):
        return "malformed", None
    box = (y / height, x / width, (y + h) / height, (x + w) / width)
    return None, CocoObject(cat_id, categories[cat_id], box, bool(ann.get("iscrowd", 0)), area)


def load_coco_annotations(path: str | os.PathLike) -> tuple[list[CocoImage], AnnotationReport]:
    """Reads an annotation JSON and parses it with `parse_coco_annotations`.

    Raises:
        FileNotFoundError: if `path` does not exist.
        ValueError: if it is not valid JSON or not a COCO annotation file.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.fspath(path)} is not valid JSON: {e}") from None
    return parse_coco_annotations(data)


@dataclasses.dataclass(frozen=True)
class CocoItem:
    """One image to encode (picklable: it travels to the worker processes).

    Attributes:
        path: the image file.
        image: its annotation entry and kept objects.
    """

    path: str
    image: CocoImage

    def key(self) -> str:
        """What identifies this item in the manifest: the image and its boxes, not the path."""
        return repr(self.image)

    def describe(self) -> str:
        """How a skipped item is named: `file_name (id N)`."""
        return f"{self.image.file_name} (id {self.image.image_id})"


def encode_coco_item(item: CocoItem, *, quality: int) -> bytes | Skip:
    """Reads and checks one image; returns its serialized record or `Skip(reason)`.

    RGB and grayscale JPEGs are stored byte for byte (TensorFlow's JPEG decoder expands
    grayscale to RGB); anything else (PNG behind a .jpg name, CMYK) is re-encoded as an RGB
    JPEG at `quality`. Every image is fully decoded once, so a corrupt file is skipped here
    and never reaches tf.data.
    """
    try:
        with open(item.path, "rb") as f:
            data = f.read()
    except OSError as e:
        return Skip(f"cannot read file: {e.strerror or e}")
    try:
        decoded = to_rgb_jpeg(data, quality=quality)
    except ImageError as e:
        return Skip(str(e))
    ann = item.image
    if (decoded.height, decoded.width) != (ann.height, ann.width):
        return Skip(
            f"image is {decoded.height}x{decoded.width} pixels but the annotation file says "
            f"{ann.height}x{ann.width} (wrong image folder?)"
        )
    keep_original = decoded.source_format == "JPEG" and decoded.source_mode == "L"
    return coco_example(ann, data if keep_original else decoded.data)


@dataclasses.dataclass
class BuildSummary:
    """The outcome of `build_coco` / `build_coco_splits`.

    Attributes:
        write: the writer's summary (records, shards, bytes, skipped images, time).
        annotations: split -> what parsing its annotation file kept and skipped.
    """

    write: WriteSummary
    annotations: dict[str, AnnotationReport]

    def format(self) -> str:
        """A multi-line human-readable summary."""
        lines = []
        for split, report in self.annotations.items():
            lines.append(f"{split}: {report.summary()}")
        lines.append(self.write.format(unit="images"))
        return "\n".join(lines)


def build_coco_splits(
    output_dir: str | os.PathLike,
    sources: Mapping[str, tuple[str | os.PathLike, str | os.PathLike]],
    *,
    num_shards: Mapping[str, int] | None = None,
    num_workers: int | None = None,
    seed: int = 0,
    quality: int = 95,
    overwrite: bool = False,
    progress: bool = True,
    copy_annotations: bool = True,
) -> BuildSummary:
    """Builds the TFRecords of several splits in one go (one manifest for the directory).

    Args:
        output_dir: the output folder.
        sources: split name -> (annotation JSON, image folder), e.g.
            `{"val": ("annotations/instances_val2017.json", "val2017")}`. Records are named
            `coco_<split>.record-NNNNN-of-NNNNN`.
        num_shards: split -> shard count; default `DEFAULT_SHARDS` (train 100, val 10, others
            10), lowered to the number of images for tiny sets.
        num_workers: encoding processes; None = all cores, <= 1 = this process.
        seed: seed of the shuffle that spreads the training images over its shards (other
            splits keep the annotation file's order).
        quality: JPEG quality for the few images that must be re-encoded.
        overwrite: replace a different data set in `output_dir`.
        progress: print the annotation reports and a progress bar to stderr.
        copy_annotations: copy the annotation file of every split but "train" next to the
            records as `instances_<split>.json`, where the evaluation finds its ground truth
            (the training file is large and never needed there).

    Returns:
        A `BuildSummary`.

    Raises:
        FileNotFoundError: a missing annotation file or image folder.
        FileExistsError: `output_dir` holds a different data set and `overwrite` is False.
        ValueError: bad arguments, or an annotation file that is not COCO or has no images.
    """
    if not sources:
        raise ValueError("sources must name at least one split")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    specs, reports = [], {}
    for split, (annotations_file, image_dir) in sources.items():
        image_root = Path(image_dir)
        if not image_root.is_dir():
            raise FileNotFoundError(f"image folder {image_root} (split {split!r}) does not exist")
        images, report = load_coco_annotations(annotations_file)
        if not images:
            raise ValueError(f"{annotations_file} lists no images")
        reports[split] = report
        if progress:
            print(f"{split}: {report.summary()}", file=sys.stderr)
        items = [CocoItem(str(image_root / im.file_name), im) for im in images]
        if split == "train":
            random.Random(seed).shuffle(items)
        wanted = (num_shards or {}).get(split)
        count = wanted if wanted is not None else min(DEFAULT_SHARDS.get(split, 10), len(items))
        specs.append(SplitSpec(split, items, count, SHARD_PATTERN))
    if overwrite:  # never leave another data set's classes beside a half-written one
        dataset_info_path(output_dir).unlink(missing_ok=True)
    summary = write_sharded(
        output_dir,
        specs,
        functools.partial(encode_coco_item, quality=quality),
        dataset="coco-tfod",
        options={"quality": quality, "seed": seed},
        item_key=CocoItem.key,
        describe=CocoItem.describe,
        num_workers=num_workers,
        overwrite=overwrite,
        progress=progress,
        unit="img",
    )
    if copy_annotations:
        for split, (annotations_file, _) in sources.items():
            if split != "train":
                target = Path(output_dir) / f"instances_{split}.json"
                try:
                    with atomic_path(target) as tmp:
                        shutil.copyfile(annotations_file, tmp)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    shards = sum(r.num_shards for r in summary.splits.values())
                    raise DiskFullError(target, shards) from e
    info = _dataset_info(specs, reports, quality, summary)
    if info is not None:
        with disk_full_as_error(dataset_info_path(output_dir), summary):
            write_dataset_info(output_dir, info)
    return BuildSummary(summary, reports)


def _dataset_info(
    specs: list[SplitSpec],
    reports: Mapping[str, AnnotationReport],
    quality: int,
    summary: WriteSummary,
) -> DatasetInfo | None:
    """The `dataset_info.json` of a build: every split's categories in id order, with the
    images holding a kept box of each; None when no file lists a category (test images)."""
    names: dict[int, str] = {}
    for report in reports.values():
        for cat_id, name in report.categories.items():
            names.setdefault(cat_id, name)
    if not names:
        return None
    images: dict[int, dict[str, int]] = {cat_id: {} for cat_id in names}
    for spec in specs:
        per_class = collections.Counter(
            cat for item in spec.items for cat in {o.category_id for o in item.image.objects}
        )
        for cat_id in names:
            images[cat_id][spec.name] = per_class[cat_id]
    return DatasetInfo(
        kind="coco",
        classes=tuple(ClassInfo(cat_id, names[cat_id], images[cat_id]) for cat_id in sorted(names)),
        label_offset=None,
        image_policy={"resize": None, "quality": quality},
        splits={name: r.num_records for name, r in summary.splits.items()},
    )


def build_coco(
    annotations_file: str | os.PathLike,
    image_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    split: str,
    num_shards: int | None = None,
    num_workers: int | None = None,
    seed: int = 0,
    quality: int = 95,
    overwrite: bool = False,
    progress: bool = True,
) -> BuildSummary:
    """Builds `coco_<split>.record-NNNNN-of-NNNNN` from one annotation file and image folder.

    Usage (tests/data/test_build_coco.py runs it on tiny files):

        build_coco("annotations/instances_val2017.json", "val2017", "tfrecords", split="val")

    Args:
        annotations_file: COCO annotation JSON (`instances_val2017.json`).
        image_dir: the folder its `file_name`s are relative to (`val2017/`).
        output_dir: the output folder.
        split: the split name ("train" gives 100 shards, "val" 10 by default).
        num_shards: shard count instead of the default.
        num_workers, seed, quality, overwrite, progress: as in `build_coco_splits`.

    The annotation file of a split other than "train" is copied next to the records
    (`instances_<split>.json`) for the evaluation.

    Returns:
        A `BuildSummary`.

    Raises:
        As `build_coco_splits`. Note that the directory's manifest names the splits written
        together: to put train and val in one folder, build them in one `build_coco_splits`
        call (or the `cvbench build-coco --coco-dir` command).
    """
    return build_coco_splits(
        output_dir,
        {split: (annotations_file, image_dir)},
        num_shards=None if num_shards is None else {split: num_shards},
        num_workers=num_workers,
        seed=seed,
        quality=quality,
        overwrite=overwrite,
        progress=progress,
    )
