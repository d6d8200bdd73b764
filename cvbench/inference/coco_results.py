"""Detections as a COCO results file: `[{"image_id", "category_id", "bbox", "score"}, ...]`.

The format `pycocotools.coco.COCO.loadRes` reads and the COCO evaluation server takes:
`bbox` is `[x, y, width, height]` in pixels of the original image (whatever the
`box_format` of the detections).

* image ids: the number a file's name is (`000000397133.jpg` -> 397133, as COCO names its
  images) when every path source is one (ASCII digits), else the position of the image in
  the results (0, 1, ...); or the ids you pass. Two files of one number (`a/1.jpg`,
  `b/1.jpg`) are refused: their detections would be one image's.
* category ids: where every class name of the model is a COCO 2017 category name, its COCO id
  (`cvbench.data.coco_labels.COCO_2017_CATEGORIES`; "person" -> 1, "dog" -> 18); else the
  ids you pass, one per class index; else class index + 1 (COCO numbers from 1).
* class names: each detection carries its boxes' class names, and they are the truth;
  `class_names` is the model's whole list (`ModelInfo.class_names`, which the default
  category ids and the count of `category_ids` need), checked against them: a list that
  names a detected class id otherwise, or is too short for it, is refused (`ValueError`).
  To write other category ids, pass `category_ids`, not other names.

A detection whose score or box is not finite (a model that outputs NaN) has no place in a
results file (strict JSON has no NaN) and is left out.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cvbench.data.builders.coco_annotations import MAX_COCO_INTEGER
from cvbench.data.coco_labels import COCO_2017_CATEGORIES
from cvbench.inference.box_formats import from_yxyx, to_yxyx
from cvbench.inference.detection import Detection
from cvbench.inference.outputs import errors_naming
from cvbench.utils.io import write_json_atomic


def default_image_ids(detections: Sequence[Detection]) -> list[int]:
    """The COCO image id of each result (module docstring).

    Raises:
        ValueError: two files whose names are the same number (module docstring).
    """
    ids = image_ids_from_names([d.source for d in detections])
    return ids if ids is not None else list(range(len(detections)))


def image_ids_from_names(sources: Sequence[Any]) -> list[int] | None:
    """The number each file's name is (`000000397133.jpg` -> 397133) when every source is a
    path whose stem is ASCII digits (`"²"` is a digit to `str.isdigit`, not to `int`) of at
    most `MAX_COCO_INTEGER`, else None.

    Raises:
        ValueError: two files with one number (`a/1.jpg`, `b/1.jpg`): their detections would
            be one image's.

    Example:
        >>> image_ids_from_names(["val/000000397133.jpg", "val/7.png"])
        [397133, 7]
        >>> image_ids_from_names(["a.jpg", "7.png"]) is None, image_ids_from_names(["².jpg"])
        (True, None)
    """
    stems = [Path(s).stem if isinstance(s, str | os.PathLike) else "" for s in sources]
    if not stems or not all(s.isascii() and s.isdigit() for s in stems):
        return None
    ids = [int(s) for s in stems]
    if max(ids) > MAX_COCO_INTEGER:
        return None
    first: dict[int, Any] = {}
    for image_id, source in zip(ids, sources, strict=True):
        if image_id in first:
            raise ValueError(
                f"{os.fspath(first[image_id])} and {os.fspath(source)} are both COCO image "
                f"{image_id} by their names: a results file would give both images' "
                "detections to one; rename one, or predict them separately"
            )
        first[image_id] = source
    return ids


def default_category_ids(class_names: Sequence[str]) -> list[int]:
    """The COCO category id of each class index (module docstring)."""
    coco = {name: cid for cid, name in COCO_2017_CATEGORIES}
    if class_names and all(n in coco for n in class_names):
        return [coco[n] for n in class_names]
    return [i + 1 for i in range(len(class_names))]


def check_detection_class_names(
    detections: Sequence[Detection], class_names: Sequence[str]
) -> None:
    """Checks that `class_names` (index -> name) gives each detected box the class name its
    detection carries (`Detection.class_names`, the model's own).

    Raises:
        ValueError: naming the first box whose class id is outside `class_names`, or whose
            name there differs from the detection's.

    Example:
        >>> det = Detection("1.jpg", (4, 4), np.zeros((1, 4), np.float32),
        ...                 np.ones(1, np.float32), np.array([1]), ("dog",), "xyxy")
        >>> check_detection_class_names([det], ["person", "dog"])
        >>> check_detection_class_names([det], ["dog", "person"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: class_names[1] is 'person', but detection 0 (1.jpg) names its class 1 'dog'...
    """
    names = list(class_names)
    for index, det in enumerate(detections):
        where = f"detection {index} ({det.source})"
        for cls, name in zip(det.class_ids, det.class_names, strict=True):
            cls = int(cls)
            if not 0 <= cls < len(names):
                raise ValueError(
                    f"{where} has class {cls} {name!r}, but class_names has only {len(names)} "
                    "names: pass the model's class names (ModelInfo.class_names)"
                )
            if names[cls] != name:
                raise ValueError(
                    f"class_names[{cls}] is {names[cls]!r}, but {where} names its class {cls} "
                    f"{name!r}: pass the model's class names (ModelInfo.class_names); "
                    "category_ids=[...] chooses other COCO ids"
                )


def coco_results(
    detections: Sequence[Detection],
    *,
    class_names: Sequence[str],
    image_ids: Sequence[int] | None = None,
    category_ids: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """The COCO results list of `detections`.

    Args:
        detections: `detect`'s results (any `box_format`).
        class_names: the model's class names (`ModelInfo.class_names`), index -> name; it
            must agree with the names the detections carry (`check_detection_class_names`).
        image_ids: one COCO image id per result; default from the file names (module doc).
        category_ids: one COCO category id per class index; default from the names.

    Returns:
        One dict per box: `image_id`, `category_id`, `bbox` `[x, y, width, height]` pixels
        (rounded to 1/100 pixel), `score` (rounded to 1e-5).

    Raises:
        ValueError: for id lists of the wrong length, or a `class_names` that contradicts
            the detections' own class names (`check_detection_class_names`).
    """
    check_detection_class_names(detections, class_names)
    ids = list(image_ids) if image_ids is not None else default_image_ids(detections)
    if len(ids) != len(detections):
        raise ValueError(f"need {len(detections)} image ids; got {len(ids)}")
    cats = list(category_ids) if category_ids is not None else default_category_ids(class_names)
    if len(cats) != len(class_names):
        raise ValueError(f"need {len(class_names)} category ids, one per class; got {len(cats)}")
    out = []
    for image_id, det in zip(ids, detections, strict=True):
        boxes = from_yxyx(to_yxyx(det.boxes, det.box_format), "xywh")
        for box, cls, score in zip(boxes, det.class_ids, det.scores, strict=True):
            if not (np.isfinite(score) and np.isfinite(box).all()):
                continue
            out.append(
                {
                    "image_id": int(image_id),
                    "category_id": int(cats[int(cls)]),
                    "bbox": [round(float(v), 2) for v in box],
                    "score": round(float(score), 5),
                }
            )
    return out


def write_coco_results(
    detections: Sequence[Detection],
    path: str | os.PathLike,
    *,
    class_names: Sequence[str],
    image_ids: Sequence[int] | None = None,
    category_ids: Sequence[int] | None = None,
) -> Path:
    """Writes `coco_results(...)` as a JSON file, atomically; returns the path.

    Raises:
        ValueError: as `coco_results` (a `class_names` that contradicts the detections'
            own names among them), before anything is written.
    """
    results = coco_results(
        detections, class_names=class_names, image_ids=image_ids, category_ids=category_ids
    )
    path = Path(path)
    with errors_naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, results)
    return path
