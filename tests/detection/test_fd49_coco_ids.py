"""`evaluate_coco` reads ids and flags by build-coco's one rule (`coco_integer`,
`coco_flag`): an id is an int or a float with no fraction (1.0 is 1; 1.9, "1" and true are
refused, where `int()` made 1.9 image 1 and true category 1), `iscrowd` is 0, 1, false or
true (pycocotools took "0" for a crowd box and ignored it: AP -1.0), and a ground-truth
bbox is 4 finite numbers (a NaN one was never refused). A malformed detection or
ground-truth entry is a `ValueError` naming its index and value; in a file, a
`BadFileError` naming the file too. On both COCO backends."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from test_fa49_nonfinite_detections import BACKENDS, GT  # one image, one dog box

from cvbench.detection.coco_eval import evaluate_coco
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic

BOX = "ground truth annotations[0]: bbox must be 4 finite numbers [x, y, w, h], got "
GOOD = {"image_id": 1, "category_id": 18, "bbox": [10, 10, 40, 30], "score": 0.9}

ANN = GT["annotations"][0]

#: What a refused id is told (`coco_eval._checked_id`).
INT = "must be an integer of at most 2**53 - 1 in magnitude, got"


def _gt(**changes):
    """`GT` with its annotation's fields changed."""
    gt = copy.deepcopy(GT)
    gt["annotations"][0].update(changes)
    return gt


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("image_id", 1.9, f"detection 1: image_id {INT} 1.9"),
        ("image_id", "1", f"detection 1: image_id {INT} '1'"),
        ("image_id", True, f"detection 1: image_id {INT} True"),
        ("category_id", True, f"detection 1 (image 1): category_id {INT} True"),
        ("category_id", 18.5, f"detection 1 (image 1): category_id {INT} 18.5"),
        # probe p50 #1: 2**53 + 1 went through float64 as 2**53, another image's id
        ("image_id", 2**53 + 1, f"detection 1: image_id {INT} 9007199254740993"),
    ],
)
def test_a_detection_with_a_non_integer_id_is_refused(backend, field, value, shown):
    bad = {**GOOD, field: value}
    with pytest.raises(ValueError) as info:
        evaluate_coco([GOOD, bad], GT, print_fn=None, backend=backend)
    assert str(info.value) == shown  # index 1: the second detection


@pytest.mark.parametrize("backend", BACKENDS)
def test_whole_float_and_numpy_ids_are_the_ids(backend):
    # 1.0 is image 1 and 18.0 category 18 (some exporters write floats), as NumPy scalars
    # are: the one box found exactly, AP 1.0 as with plain ints
    dets = [{**GOOD, "image_id": 1.0, "category_id": np.int64(18)}]
    gt = copy.deepcopy(GT)
    gt["images"][0]["id"] = 1.0
    gt["annotations"][0].update(image_id=np.int32(1), category_id=18.0, iscrowd=False)
    metrics = evaluate_coco(dets, gt, print_fn=None, backend=backend, image_ids=[np.int64(1)])
    assert metrics["AP"] == pytest.approx(1.0)
    assert gt["images"][0]["id"] == 1.0 and isinstance(gt["images"][0]["id"], float)  # untouched


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("iscrowd", "ap"), [(0, 1.0), (False, 1.0), (0.0, 1.0), (1, -1.0),
                                             (True, -1.0)])  # fmt: skip
def test_iscrowd_is_a_coco_flag(backend, iscrowd, ap):
    # not crowd: the one box found exactly (AP 1.0); crowd: the only ground truth is ignored
    # (and the detection on it too), so no cell has ground truth: -1.0
    metrics = evaluate_coco([GOOD], _gt(iscrowd=iscrowd), print_fn=None, backend=backend)
    assert metrics["AP"] == pytest.approx(ap)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("gt", "shown"),
    [
        (_gt(iscrowd="0"), "ground truth annotations[0]: iscrowd must be 0, 1, false or true, "
                           "got '0'"),
        (_gt(iscrowd=2), "ground truth annotations[0]: iscrowd must be 0, 1, false or true, got 2"),
        (_gt(image_id=1.9), f"ground truth annotations[0]: image_id {INT} 1.9"),
        (_gt(category_id=True), f"ground truth annotations[0]: category_id {INT} True"),
        (_gt(bbox=[float("nan"), 10, 40, 30]), BOX + "[nan, 10, 40, 30]"),
        (_gt(bbox=[10, 10, float("inf"), 30]), BOX + "[10, 10, inf, 30]"),
        (_gt(bbox=[10, 10, "40", 30]), BOX + "[10, 10, '40', 30]"),
        (_gt(bbox=[10, 10, 40]), BOX + "[10, 10, 40]"),
        ({**GT, "images": [{"id": "1", "width": 100, "height": 80}]},
         f"ground truth images[0]: id {INT} '1'"),
        ({**GT, "categories": [{"id": 18.5, "name": "dog"}]},
         f"ground truth categories[0]: id {INT} 18.5"),
        # probe p50 #6: pycocotools indexes by id, a later entry replaced an earlier one
        ({**GT, "annotations": [*GT["annotations"], {**ANN, "bbox": [0, 0, 5, 5]}]},
         "ground truth annotations[1]: duplicate id 1"),
        ({**GT, "images": GT["images"] * 2}, "ground truth images[1]: duplicate id 1"),
        ({**GT, "categories": [*GT["categories"], {"id": 18.0, "name": "cat"}]},
         "ground truth categories[1]: duplicate id 18"),
        ({**GT, "images": [{"width": 100, "height": 80}]},
         "ground truth images[0]: no 'id' in {'width': 100, 'height': 80}"),
    ],
)  # fmt: skip
def test_malformed_ground_truth_is_refused(backend, gt, shown):
    with pytest.raises(ValueError) as info:
        evaluate_coco([GOOD], gt, print_fn=None, backend=backend)
    assert str(info.value) == shown


def test_a_non_integer_image_ids_argument_is_refused():
    with pytest.raises(ValueError) as info:
        evaluate_coco([GOOD], GT, print_fn=None, image_ids=[1, 1.5])
    assert str(info.value) == f"image_ids[1] {INT} 1.5"


def test_malformed_files_are_bad_files_naming_them(tmp_path):
    dets, gt = tmp_path / "dets.json", tmp_path / "gt.json"
    dets.write_text(json.dumps([{**GOOD, "image_id": 1.9}]))
    gt.write_text(json.dumps(GT))
    with pytest.raises(BadFileError) as info:
        evaluate_coco(dets, gt, print_fn=None)
    assert str(info.value) == f"{dets}: detection 0: image_id {INT} 1.9"
    gt.write_text(json.dumps(_gt(iscrowd="0")))
    with pytest.raises(BadFileError) as info:
        evaluate_coco([GOOD], gt, print_fn=None)
    assert str(info.value) == (
        f"{gt}: ground truth annotations[0]: iscrowd must be 0, 1, false or true, got '0'"
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "gt",
    [
        # probe p50 #7: pycocotools records a match by the box's id, 0 meaning none, so a
        # box of id 0 was never found: the exact detection scored AP 0.0
        _gt(id=0),
        # probe p50 #8: iscrowd is optional (build-coco reads a missing one as 0);
        # pycocotools raised KeyError: 'iscrowd'
        {**GT, "annotations": [{k: v for k, v in ANN.items() if k != "iscrowd"}]},
        # review V F6: build-coco keeps a box of any id, or none: evaluation (which numbers
        # the boxes anew) refused the same file
        _gt(id=2**53 + 1),
        _gt(id="x"),
        {**GT, "annotations": [{k: v for k, v in ANN.items() if k != "id"}]},
    ],
    ids=["box_id_0", "no_iscrowd", "box_id_past_2_53", "box_id_text", "no_box_id"],
)
def test_an_exact_detection_scores_ap_1(backend, gt):
    # one image, one box, the detection on it exactly: AP 1.0 at every IoU threshold
    stats = evaluate_coco([GOOD], gt, print_fn=None, backend=backend)
    assert stats["AP"] == pytest.approx(1.0) and stats["AP75"] == pytest.approx(1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_boxes_numbered_from_0_are_all_found(backend):
    # two images, one box each, ids 0 and 1: both exact detections are found (AP 1.0; with
    # the box of id 0 never matched, half the boxes were missed and one detection false)
    gt = {
        "images": [{"id": 1, "width": 100, "height": 80}, {"id": 2, "width": 100, "height": 80}],
        "categories": GT["categories"],
        "annotations": [{**ANN, "id": 0}, {**ANN, "id": 1, "image_id": 2}],
    }
    dets = [GOOD, {**GOOD, "image_id": 2}]
    assert evaluate_coco(dets, gt, print_fn=None, backend=backend)["AP"] == pytest.approx(1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_categories_of_one_name_keep_both_aps(backend):
    # probe p50 #15: per_category=True keyed APs by name: one of two "dog"s was dropped.
    # Category 18's box is found exactly (AP 1.0); category 19 has a box and no detection
    # (AP 0.0)
    gt = {
        **GT,
        "categories": [{"id": 18, "name": "dog"}, {"id": 19, "name": "dog"}],
        "annotations": [ANN, {**ANN, "id": 2, "category_id": 19, "bbox": [50, 40, 20, 20]}],
    }
    stats = evaluate_coco([GOOD], gt, print_fn=None, backend=backend, per_category=True)
    assert stats["AP/dog (id 18)"] == pytest.approx(1.0)
    assert stats["AP/dog (id 19)"] == pytest.approx(0.0)
    assert "AP/dog" not in stats


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_name_that_is_another_categorys_key_keeps_every_ap(backend):
    # review V F4: "dog", "dog" and "dog (id 18)" gave two keys: one AP was lost
    cats = [{"id": 18, "name": "dog"}, {"id": 19, "name": "dog"}, {"id": 20, "name": "dog (id 18)"}]
    gt = {**GT, "categories": cats}
    stats = evaluate_coco([GOOD], gt, print_fn=None, backend=backend, per_category=True)
    aps = {k: v for k, v in stats.items() if k.startswith("AP/")}
    assert sorted(aps) == ["AP/dog (id 18)", "AP/dog (id 18) (id 20)", "AP/dog (id 19)"]
    assert aps["AP/dog (id 18)"] == pytest.approx(1.0)
