"""COCO annotation files, checked: what `build_coco` keeps, skips and refuses.

`load_coco_annotations(path)` reads an annotation JSON (`instances_val2017.json`) and
`parse_coco_annotations(data)` checks it, returning the images with their kept boxes
(`cvbench.data.coco_schema.CocoImage`) and an `AnnotationReport`.

Skipped and counted (the OD API rules): boxes with zero width or height, boxes outside the
image (x < 0, y < 0, x + w > width or y + h > height); also annotations naming an unknown
category or image, and malformed ones: a `bbox` that is not 4 finite numbers, an `area`
that is not a finite number, an `image_id` or `category_id` missing or not an integer by the
rule of the images' and categories' ids (an int, or a float with no fraction such as `1.0`,
which some exporters write; not `1.9`, `"1"` or `true`), an `iscrowd` other than 0, 1, false
or true (`"0"` is not false). Images without boxes are kept (COCOeval counts them) and counted.

Refused (`BadFileError` from `load_coco_annotations`, naming the file and the entry, e.g.
`instances.json: categories[0]: no 'id' in {"name": "x"}`): a file that is not JSON, no
`images` list, `categories` or `annotations` that are not lists, an image without an integer
`id`, positive `height`/`width` or a `file_name` that stays inside the image folder (no
absolute path, no `..`), a category without an integer `id` in 1..`MAX_CATEGORY_ID`
(`cvbench.data.coco_labels`), duplicate image, category or annotation ids; also a file that is not a
regular file (a FIFO, a device), one over `MAX_ANNOTATIONS_BYTES` (2 GiB: COCO 2017's
`instances_train2017.json` has 448 MB), or JSON nested deeper than
`cvbench.utils.files.MAX_JSON_DEPTH` (COCO needs 4 levels), all before parsing.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from collections.abc import Mapping
from typing import Any

from cvbench.data.coco_labels import MAX_CATEGORY_ID
from cvbench.data.coco_schema import CocoImage, CocoObject
from cvbench.data.safe_paths import relative_name
from cvbench.utils.errors import BadFileError, check_utf8
from cvbench.utils.files import read_json

#: The largest annotation file read (COCO 2017's instances_train2017.json has 448 MB).
MAX_ANNOTATIONS_BYTES = 2 << 30

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
        ValueError: on a structurally broken file, naming the entry: a missing `images`
            list, `categories` or `annotations` that are not lists, an image without
            `id`/`file_name`/`height`/`width`, with a non-positive size or a `file_name`
            that leaves the image folder (absolute, or with `..`), a category without an
            integer `id` in 1..`MAX_CATEGORY_ID`, duplicate image, category or annotation
            ids.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("images"), list):
        raise ValueError("not a COCO annotation file: no 'images' list")
    categories = _categories(data)
    report = AnnotationReport(num_images=len(data["images"]), categories=dict(categories))
    sizes: dict[int, tuple[str, int, int]] = {}
    for index, img in enumerate(data["images"]):
        image_id, name, height, width = _image_entry(img, f"images[{index}]")
        if image_id in sizes:
            raise ValueError(f"images[{index}]: duplicate image id {image_id}")
        sizes[image_id] = (name, height, width)

    objects: dict[int, list[CocoObject]] = {i: [] for i in sizes}
    annotations = _list_field(data, "annotations")
    report.num_annotations = len(annotations)
    annotation_ids: set[int] = set()
    for index, ann in enumerate(annotations):
        ann_id = coco_integer(ann.get("id")) if isinstance(ann, Mapping) else None
        if ann_id is not None and ann_id in annotation_ids:
            # pycocotools indexes boxes by id: a later one replaces an earlier one in the
            # evaluation's ground truth (perfect detections scored AP 0.25)
            raise ValueError(f"annotations[{index}]: duplicate annotation id {ann_id}")
        annotation_ids.add(ann_id)
        reason, obj = _check_annotation(ann, sizes, categories)
        if reason:
            report.skip(reason, ann.get("id") if isinstance(ann, Mapping) else None)
        else:
            objects[coco_integer(ann["image_id"])].append(obj)
            report.num_boxes += 1

    images = [
        CocoImage(image_id, name, height, width, tuple(objects[image_id]))
        for image_id, (name, height, width) in sizes.items()
    ]
    report.images_without_boxes = sum(1 for im in images if not im.objects)
    return images, report


def _list_field(data: Mapping[str, Any], key: str) -> list:
    """`data[key]`, a list; `[]` when the key is missing."""
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"'{key}' must be a list, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value) if _jsonable(value) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def coco_integer(value: Any) -> int | None:
    """`value` as an int when it is one (an int, or a float with no fraction, as some
    exporters write ids) of at most `MAX_COCO_INTEGER` in magnitude, else None: the one rule
    for a COCO id (images', categories' and annotations' ids; `iscrowd` by `coco_flag`).

    Example:
        >>> [coco_integer(v) for v in (3, 3.0, 1.9, "3", True, None)]
        [3, 3, None, None, None, None]
        >>> coco_integer(2**53 - 1), coco_integer(2**53 + 1), coco_integer(1e300)
        (9007199254740991, None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and abs(value) <= MAX_COCO_INTEGER:
        return value
    return None


#: The largest id `coco_integer` takes, 2**53 - 1: every integer up to it is carried exactly
#: by a float64 (evaluation gathers image ids over ranks as float64 rows, JSON readers of
#: other languages read numbers as doubles) and by the records' int64 `image/source_id`;
#: 2**53 + 1 read as 2**53 made an image's detections another image's (probe p50 #1).
MAX_COCO_INTEGER = 2**53 - 1


def coco_flag(value: Any) -> bool | None:
    """A COCO 0/1 field (`iscrowd`) as a bool: 0, 1 (`coco_integer`), false or true; else None
    (`"0"` is no flag: `bool("0")` is True).

    Example:
        >>> [coco_flag(v) for v in (0, 1, 1.0, False, True, "0", 2, None)]
        [False, True, True, False, True, None, None, None]
    """
    if isinstance(value, bool):
        return value
    return {0: False, 1: True}.get(coco_integer(value))


def _categories(data: Mapping[str, Any]) -> dict[int, str]:
    """Category id -> name, checked (see `parse_coco_annotations`)."""
    categories: dict[int, str] = {}
    for index, cat in enumerate(_list_field(data, "categories")):
        where = f"categories[{index}]"
        if not isinstance(cat, Mapping):
            raise ValueError(f"{where}: expected an object with an 'id', got {_short(cat)}")
        if "id" not in cat:
            raise ValueError(f"{where}: no 'id' in {_short(cat)}")
        cat_id = coco_integer(cat["id"])
        if cat_id is None or not 1 <= cat_id <= MAX_CATEGORY_ID:
            raise ValueError(
                f"{where}: category id {_short(cat['id'])} is not an integer in "
                f"1..{MAX_CATEGORY_ID} (the largest id sets a detector's width: its class index "
                "is id - 1); renumber the categories"
            )
        if cat_id in categories:
            raise ValueError(f"{where}: duplicate category id {cat_id}")
        # a model's class name: refused here, not when its records are encoded (a surrogate)
        categories[cat_id] = check_utf8(str(cat.get("name", cat_id)), what=f"{where}: the name")
    return categories


def _image_entry(img: Any, where: str) -> tuple[int, str, int, int]:
    """(id, file_name, height, width) of one `images` entry, checked."""
    if not isinstance(img, Mapping):
        raise ValueError(f"{where}: expected an image object, got {_short(img)}")
    missing = [k for k in ("id", "file_name", "height", "width") if k not in img]
    if missing:
        raise ValueError(f"{where}: no {', '.join(repr(k) for k in missing)} in {_short(img)}")
    image_id, height, width = (coco_integer(img[k]) for k in ("id", "height", "width"))
    name = img["file_name"]
    if image_id is None:
        raise ValueError(
            f"{where}: image id {_short(img['id'])} is not an integer of at most 2**53 - 1 "
            "in magnitude (what evaluation carries exactly); renumber the images"
        )
    if height is None or width is None or height <= 0 or width <= 0:
        raise ValueError(
            f"{where} (id {image_id}): size {_short(img['height'])}x{_short(img['width'])} is "
            "not two positive integers"
        )
    if not isinstance(name, str) or not relative_name(name):
        raise ValueError(
            f"{where} (id {image_id}): file_name {_short(name)} is not a relative path inside "
            "the image folder"
        )
    return image_id, name, height, width


def _check_annotation(
    ann: Any, sizes: Mapping[int, tuple[str, int, int]], categories: Mapping[int, str]
) -> tuple[str | None, CocoObject | None]:
    """(skip reason, None) or (None, the object) for one annotation."""
    fields = _annotation_fields(ann)
    if fields is None:
        return "malformed", None
    image_id, cat_id, (x, y, w, h), area, crowd = fields
    if image_id not in sizes:
        return "unknown_image", None
    if cat_id not in categories:
        return "unknown_category", None
    _, height, width = sizes[image_id]
    if w <= 0 or h <= 0:
        return "zero_size", None
    if x < 0 or y < 0 or x + w > width or y + h > height:
        return "outside_image", None
    box = (y / height, x / width, (y + h) / height, (x + w) / width)
    return None, CocoObject(cat_id, categories[cat_id], box, crowd, w * h if area is None else area)


def _annotation_fields(
    ann: Any,
) -> tuple[int, int, tuple[float, float, float, float], float | None, bool] | None:
    """(image_id, category_id, bbox, area or None, iscrowd) of an annotation, or None when
    it is malformed: ids by the images' and categories' rule (`coco_integer`: an int, or a
    float with no fraction; never a bool, a string or 1.9), a `bbox` of 4 finite numbers,
    an `area` (optional) that is a finite number, an `iscrowd` (optional, 0) of 0, 1, false
    or true. A lax cast would read `"iscrowd": "0"` as a crowd and image 1.9 as image 1."""
    if not isinstance(ann, Mapping) or "image_id" not in ann or "category_id" not in ann:
        return None
    image_id, cat_id = coco_integer(ann["image_id"]), coco_integer(ann["category_id"])
    bbox = ann.get("bbox")
    if image_id is None or cat_id is None or not isinstance(bbox, list | tuple) or len(bbox) != 4:
        return None
    numbers = [_finite(v) for v in bbox]
    area = _finite(ann["area"]) if "area" in ann else None
    crowd = coco_flag(ann.get("iscrowd", 0))
    if None in numbers or ("area" in ann and area is None) or crowd is None:
        return None
    x, y, w, h = numbers
    return image_id, cat_id, (x, y, w, h), area, crowd


def _finite(value: Any) -> float | None:
    """`value` as a float when it is a finite number (an int or a float, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def load_coco_annotations(path: str | os.PathLike) -> tuple[list[CocoImage], AnnotationReport]:
    """Reads an annotation JSON and parses it with `parse_coco_annotations`.

    Raises:
        FileNotFoundError: if `path` does not exist.
        BadFileError: naming the file (and the entry), if it is not a regular file, over
            `MAX_ANNOTATIONS_BYTES`, nested too deep, not valid JSON or not a COCO
            annotation file (see `parse_coco_annotations`).
    """
    data = read_json(path, limit=MAX_ANNOTATIONS_BYTES, what="annotations file")
    try:
        return parse_coco_annotations(data)
    except ValueError as e:
        raise BadFileError(f"{os.fspath(path)}: {e}") from None
