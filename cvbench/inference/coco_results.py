"""Detections as a COCO results file: `[{"image_id", "category_id", "bbox", "score"}, ...]`.

The format `pycocotools.coco.COCO.loadRes` reads and the COCO evaluation server takes:
`bbox` is `[x, y, width, height]` in pixels of the original image (whatever the
`box_format` of the detections).

* image ids: the number a file's name is (`000000397133.jpg` -> 397133, as COCO names its
  images) when every path source is one, else the position of the image in the results
  (0, 1, ...); or the ids you pass.
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

from cvbench.data.coco_labels import COCO_2017_CATEGORIES
from cvbench.inference.box_formats import from_yxyx, to_yxyx
from cvbench.inference.detection import Detection
from cvbench.inference.outputs import errors_naming
from cvbench.utils.io import write_json_atomic


def default_image_ids(detections: Sequence[Detection]) -> list[int]:
    """The COCO image id of each result (module docstring)."""
    stems = [Path(d.source).stem if isinstance(d.source, str) else "" for d in detections]
    if stems and all(s.isdigit() for s in stems):
        return [int(s) for s in stems]
    return list(range(len(detections)))


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
