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
        class_names: the model's class names (`ModelInfo.class_names`), index -> name.
        image_ids: one COCO image id per result; default from the file names (module doc).
        category_ids: one COCO category id per class index; default from the names.

    Returns:
        One dict per box: `image_id`, `category_id`, `bbox` `[x, y, width, height]` pixels
        (rounded to 1/100 pixel), `score` (rounded to 1e-5).

    Raises:
        ValueError: for id lists of the wrong length.
    """
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
    """Writes `coco_results(...)` as a JSON file, atomically; returns the path."""
    results = coco_results(
        detections, class_names=class_names, image_ids=image_ids, category_ids=category_ids
    )
    path = Path(path)
    with errors_naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, results)
    return path
