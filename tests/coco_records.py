"""Tiny COCO records for tests: two 20x30 images, one box each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image


def build_two_image_coco(root: Path, categories: dict[int, str]) -> Path:
    """Builds train and val records (the same two images) under `root / "records"`: image 1
    has a box of category 3 at [1, 1, 5, 5], image 2 one of category 90 at [2, 2, 8, 8]
    (COCO `[x, y, width, height]` pixels); `categories` maps the listed ids to names (3 and
    90 must be among them). Returns the records folder."""
    from cvbench.data import build_coco_splits

    (root / "img").mkdir(parents=True)
    for i in (1, 2):
        Image.fromarray(np.full((20, 30, 3), 100, np.uint8)).save(root / "img" / f"{i}.jpg")
    data = {
        "images": [{"id": i, "file_name": f"{i}.jpg", "height": 20, "width": 30} for i in (1, 2)],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 3, "bbox": [1, 1, 5, 5], "iscrowd": 0},
            {"id": 2, "image_id": 2, "category_id": 90, "bbox": [2, 2, 8, 8], "iscrowd": 0},
        ],
        "categories": [{"id": k, "name": v} for k, v in sorted(categories.items())],
    }
    (root / "instances_val.json").write_text(json.dumps(data))
    sources = {s: (root / "instances_val.json", root / "img") for s in ("train", "val")}
    build_coco_splits(root / "records", sources, num_workers=1, progress=False)
    return root / "records"
