"""Builds COCO TFRecords in the TF Object Detection API format.

Input: a COCO annotation JSON (`instances_train2017.json`) and its image folder
(`train2017/`). Output: `coco_train.record-00000-of-00100` … (100 shards) or
`coco_val.record-00000-of-00010` … (10 shards), one `tf.train.Example` per image:

    image/height, image/width               int64
    image/filename, image/source_id         bytes (source_id = str(image id))
    image/key/sha256                        bytes (hex digest of image/encoded)
    image/encoded, image/format             the original JPEG bytes, b"jpeg"
    image/object/bbox/{xmin,xmax,ymin,ymax} float lists, normalized to [0, 1]
    image/object/class/text                 bytes list, category names
    image/object/class/label                int64 list, COCO category ids (NVIDIA's copy of
                                            the OD API script forgot to write this one)
    image/object/is_crowd                   int64 list
    image/object/area                       float list, pixels (the annotation's area)

Annotations are checked before anything is written. Skipped and counted (the OD API rules):
boxes with zero width or height, boxes outside the image (x < 0, y < 0, x + w > width or
y + h > height); also annotations naming an unknown category or image, and malformed ones.
Images without boxes are kept (COCOeval counts them) and counted.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from cvbench.data import coco as fields

SKIP_REASONS: tuple[str, ...] = (
    "zero_size",
    "outside_image",
    "unknown_category",
    "unknown_image",
    "malformed",
)


@dataclasses.dataclass(frozen=True)
class CocoObject:
    """One kept annotation.

    Attributes:
        category_id: the COCO category id.
        category_name: its name.
        box: normalized `[ymin, xmin, ymax, xmax]`, inside [0, 1].
        is_crowd: the annotation's `iscrowd`.
        area: the annotation's `area` (segmentation area, pixels).
    """

    category_id: int
    category_name: str
    box: tuple[float, float, float, float]
    is_crowd: bool
    area: float


@dataclasses.dataclass(frozen=True)
class CocoImage:
    """One image of the annotation file with its kept objects."""

    image_id: int
    file_name: str
    height: int
    width: int
    objects: tuple[CocoObject, ...]


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
    """

    num_images: int = 0
    num_annotations: int = 0
    num_boxes: int = 0
    images_without_boxes: int = 0
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    examples: dict[str, list[Any]] = dataclasses.field(default_factory=dict)

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

    report = AnnotationReport(num_images=len(data["images"]))
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


def coco_example(image: CocoImage, encoded: bytes, image_format: str = "jpeg") -> tf.train.Example:
    """The OD API `tf.train.Example` of one image.

    Args:
        image: the image and its kept objects.
        encoded: the image file's bytes.
        image_format: the value of `image/format`.
    """
    objs = image.objects

    def b(values: list[bytes]) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

    def i(values: list[int]) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def f(values: list[float]) -> tf.train.Feature:
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    feature = {
        fields.HEIGHT: i([image.height]),
        fields.WIDTH: i([image.width]),
        fields.FILENAME: b([image.file_name.encode("utf8")]),
        fields.SOURCE_ID: b([str(image.image_id).encode("utf8")]),
        fields.KEY_SHA256: b([hashlib.sha256(encoded).hexdigest().encode("utf8")]),
        fields.ENCODED: b([encoded]),
        fields.FORMAT: b([image_format.encode("utf8")]),
        fields.BBOX_YMIN: f([o.box[0] for o in objs]),
        fields.BBOX_XMIN: f([o.box[1] for o in objs]),
        fields.BBOX_YMAX: f([o.box[2] for o in objs]),
        fields.BBOX_XMAX: f([o.box[3] for o in objs]),
        fields.CLASS_TEXT: b([o.category_name.encode("utf8") for o in objs]),
        fields.CLASS_LABEL: i([o.category_id for o in objs]),
        fields.IS_CROWD: i([int(o.is_crowd) for o in objs]),
        fields.AREA: f([o.area for o in objs]),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))
