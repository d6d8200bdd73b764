"""`write_coco_results` / `coco_results`: the class names each detection carries are the
truth; a `class_names` that names a detected class id otherwise (a reordered list) or is too
short for it is refused with a `ValueError` naming the first disagreement, before anything
is written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cvbench.inference.coco_results import coco_results, write_coco_results
from cvbench.inference.detection import Detection

pytestmark = pytest.mark.backend_agnostic

NAMES = ("person", "bicycle", "car")  # COCO ids 1, 2, 3


def _detections():
    """Image 5: a "car" (class 2) and a "person" (class 0); image 9: a "bicycle" (class 1)."""
    return [
        Detection(
            "val/5.jpg",
            (100, 200),
            np.array([[10, 20, 30, 60], [0, 0, 50, 100]], np.float32),
            np.array([0.9, 0.5], np.float32),
            np.array([2, 0], np.int32),
            ("car", "person"),
            "xyxy",
        ),
        Detection(
            "val/9.jpg",
            (100, 200),
            np.array([[1, 2, 3, 4]], np.float32),
            np.array([0.25], np.float32),
            np.array([1], np.int32),
            ("bicycle",),
            "xyxy",
        ),
    ]


def test_the_models_names_write_the_detections_own_categories(tmp_path):
    path = write_coco_results(_detections(), tmp_path / "r.json", class_names=NAMES)
    assert json.loads(path.read_text()) == [
        {"image_id": 5, "category_id": 3, "bbox": [10.0, 20.0, 20.0, 40.0], "score": 0.9},
        {"image_id": 5, "category_id": 1, "bbox": [0.0, 0.0, 50.0, 100.0], "score": 0.5},
        {"image_id": 9, "category_id": 2, "bbox": [1.0, 2.0, 2.0, 2.0], "score": 0.25},
    ]


def test_a_reordered_list_is_refused_naming_the_first_disagreement(tmp_path):
    reordered = ("bicycle", "car", "person")  # was: the car written as "person" (id 1)
    out = tmp_path / "r.json"
    with pytest.raises(
        ValueError,
        match=r"^class_names\[2\] is 'person', but detection 0 \(val/5\.jpg\) names its "
        r"class 2 'car': pass the model's class names \(ModelInfo\.class_names\)",
    ):
        write_coco_results(_detections(), out, class_names=reordered)
    assert not out.exists()


def test_a_short_list_is_a_value_error_not_an_index_error():
    with pytest.raises(
        ValueError,
        match=r"^detection 0 \(val/5\.jpg\) has class 2 'car', but class_names has only 2 "
        r"names",
    ):
        coco_results(_detections(), class_names=NAMES[:2])


def test_other_category_ids_go_through_category_ids():
    results = coco_results(_detections(), class_names=NAMES, category_ids=[11, 12, 13])
    assert [r["category_id"] for r in results] == [13, 11, 12]
