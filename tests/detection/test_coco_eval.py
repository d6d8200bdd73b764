"""Tests for the COCO evaluation adapter (pycocotools and faster-coco-eval backends)."""

from __future__ import annotations

import contextlib
import doctest
import importlib.util
import io
import json

import numpy as np
import pytest

from cvbench.detection import coco_eval
from cvbench.detection.coco_eval import (
    COCO_METRIC_NAMES,
    detections_to_coco,
    evaluate_coco,
    format_coco_table,
)

HAS_FASTER = importlib.util.find_spec("faster_coco_eval") is not None


def _groundtruth() -> dict:
    """Four 200x100 images; at most one box per (image, category), so perfect detections reach
    AR1 = 1. Areas cover the three COCO ranges: small < 32^2, medium < 96^2, large above."""
    images = [{"id": i, "width": 200, "height": 100, "file_name": f"{i}.jpg"} for i in (1, 2, 3, 4)]
    boxes = [
        (1, 1, [10, 10, 20, 20]),  # area 400: small
        (1, 3, [50, 20, 60, 50]),  # area 3000: medium
        (2, 1, [0, 0, 150, 90]),  # area 13500: large
        (2, 2, [100, 10, 40, 30]),  # area 1200: medium
        (3, 2, [5, 5, 10, 8]),  # area 80: small
        (3, 3, [60, 0, 120, 100]),  # area 12000: large
        (4, 1, [30, 30, 50, 40]),  # area 2000: medium
    ]
    anns = [
        {
            "id": k + 1,
            "image_id": im,
            "category_id": c,
            "bbox": b,
            "area": b[2] * b[3],
            "iscrowd": 0,
        }
        for k, (im, c, b) in enumerate(boxes)
    ]
    # A crowd region: matching it is neither a true nor a false positive.
    anns.append(
        {"id": 99, "image_id": 4, "category_id": 2, "bbox": [120, 0, 80, 100], "area": 8000.0,
         "iscrowd": 1}
    )  # fmt: skip
    cats = [{"id": 1, "name": "person"}, {"id": 2, "name": "bicycle"}, {"id": 3, "name": "car"}]
    return {"images": images, "annotations": anns, "categories": cats}


def _perturbed_detections(gt: dict, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    dets = []
    for a in gt["annotations"]:
        if a["iscrowd"]:
            continue
        x, y, w, h = a["bbox"]
        jitter = rng.uniform(-0.25, 0.25, 4) * [w, h, w, h]
        dets.append(
            {
                "image_id": a["image_id"],
                "category_id": a["category_id"],
                "bbox": [float(v) for v in np.add([x, y, w, h], jitter)],
                "score": float(rng.uniform(0.2, 1.0)),
            }
        )
    for _ in range(6):  # false positives
        dets.append(
            {
                "image_id": int(rng.integers(1, 5)),
                "category_id": int(rng.integers(1, 4)),
                "bbox": [float(v) for v in rng.uniform(0, 60, 4) + [0, 0, 5, 5]],
                "score": float(rng.uniform(0.0, 0.9)),
            }
        )
    return dets


def _pycocotools_direct(gt_path, det_path) -> np.ndarray:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_path))
        coco_dt = coco_gt.loadRes(str(det_path))
        ev = COCOeval(coco_gt, coco_dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev.stats


def test_perfect_detections_give_one_everywhere(tmp_path):
    gt = _groundtruth()
    dets = [
        {
            "image_id": a["image_id"],
            "category_id": a["category_id"],
            "bbox": a["bbox"],
            "score": 1.0,
        }
        for a in gt["annotations"]
        if not a["iscrowd"]
    ]
    printed = []
    metrics = evaluate_coco(dets, gt, print_fn=printed.append)
    assert list(metrics) == list(COCO_METRIC_NAMES)
    # Means of 101 recall-precision cells of 1.0 can round to 0.9999999999999998.
    assert metrics == pytest.approx(dict.fromkeys(COCO_METRIC_NAMES, 1.0), abs=1e-12)
    table = printed[0].splitlines()
    assert len(table) == 12
    assert table[0] == (
        " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 1.000"
    )


def test_perturbed_detections_match_pycocotools_on_same_json(tmp_path):
    gt = _groundtruth()
    gt_path = tmp_path / "gt.json"
    gt_path.write_text(json.dumps(gt))
    dets = _perturbed_detections(gt)
    before = json.dumps(dets)
    det_path = tmp_path / "out" / "detections.json"
    metrics = evaluate_coco(dets, gt_path, detections_path=det_path, print_fn=None)
    assert json.dumps(dets) == before  # inputs not mutated (pycocotools' loadRes would)
    assert json.loads(det_path.read_text()) == dets
    expected = _pycocotools_direct(gt_path, det_path)
    np.testing.assert_array_equal([metrics[n] for n in COCO_METRIC_NAMES], expected)
    assert 0.0 < metrics["AP"] < 1.0  # a non-trivial case


def test_per_category_ap_and_table_lines():
    gt = _groundtruth()
    # Only "person" (id 1) detected, perfectly: person AP 1, the others 0.
    dets = [
        {"image_id": a["image_id"], "category_id": 1, "bbox": a["bbox"], "score": 0.9}
        for a in gt["annotations"]
        if a["category_id"] == 1
    ]
    printed = []
    metrics = evaluate_coco(dets, gt, per_category=True, print_fn=printed.append)
    assert metrics["AP/person"] == 1.0
    assert metrics["AP/bicycle"] == 0.0
    assert metrics["AP/car"] == 0.0
    # Overall AP is the mean over the three categories: (1 + 0 + 0) / 3.
    assert metrics["AP"] == pytest.approx(1 / 3)
    assert printed[0].splitlines()[12] == " AP/person  = 1.000"


def test_no_detections_and_image_subset():
    gt = _groundtruth()
    metrics = evaluate_coco([], gt, print_fn=None)
    assert metrics["AP"] == 0.0 and metrics["AR100"] == 0.0
    # Restricted to image 1 (one small person, one medium car): large cells have no ground truth.
    dets = [{"image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "score": 1.0}]
    metrics = evaluate_coco(dets, gt, image_ids=[1], print_fn=None)
    assert metrics["APl"] == -1.0
    assert metrics["APs"] == pytest.approx(1.0, abs=1e-12)
    # person AP 1.0, car AP 0.0 (bicycle has no ground truth in image 1: excluded).
    assert metrics["AP"] == pytest.approx(0.5)


def test_bad_inputs_raise_value_error():
    gt = _groundtruth()
    with pytest.raises(ValueError, match="not in the ground truth"):
        evaluate_coco([{"image_id": 7, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1}], gt)
    with pytest.raises(ValueError, match="backend"):
        evaluate_coco([], gt, backend="fast")
    with pytest.raises(ValueError, match="4 numbers"):
        evaluate_coco([{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1], "score": 1}], gt)
    with pytest.raises(ValueError, match="missing keys"):
        evaluate_coco([], {"images": []})


def test_annotations_without_area_get_the_box_area():
    # Regression: a box-only annotation file (no "area") made pycocotools raise KeyError 'area'
    # in the middle of a training run's evaluation (cvbench train --eval-count on records
    # built from such a file). The box area w x h is what COCO.loadRes gives results.
    gt = _groundtruth()
    bare = {**gt, "annotations": [{k: v for k, v in a.items() if k != "area"}
                                  for a in gt["annotations"]]}  # fmt: skip
    dets = _perturbed_detections(gt, 1)
    expected = evaluate_coco(dets, gt, print_fn=None)  # _groundtruth's areas are w x h
    assert evaluate_coco(dets, bare, print_fn=None) == expected
    assert all("area" not in a for a in bare["annotations"])  # the caller's dict untouched
    broken = {**bare, "annotations": [{"id": 1, "image_id": 1, "category_id": 1}]}
    with pytest.raises(ValueError, match="has no area and no .x, y, w, h. bbox"):
        evaluate_coco([], broken, print_fn=None)


@pytest.mark.skipif(not HAS_FASTER, reason="faster-coco-eval not installed")
def test_faster_backend_gives_the_same_numbers():
    gt = _groundtruth()
    for seed in range(3):
        dets = _perturbed_detections(gt, seed)
        ref = evaluate_coco(dets, gt, per_category=True, print_fn=None)
        fast = evaluate_coco(dets, gt, per_category=True, backend="faster", print_fn=None)
        assert list(fast) == list(ref)
        np.testing.assert_allclose(list(fast.values()), list(ref.values()), rtol=0, atol=1e-12)


def test_detections_to_coco_maps_boxes_and_classes():
    # Image 42 is 100 high x 200 wide; box [ymin, xmin, ymax, xmax] = [0.1, 0.25, 0.5, 1.2]
    # clips xmax to 1.0 -> x = 0.25 * 200 = 50, y = 0.1 * 100 = 10, w = 0.75 * 200 = 150,
    # h = 0.4 * 100 = 40. Class index 0 maps to COCO id 1, index 2 to id 3.
    dets = detections_to_coco(
        image_ids=np.array([42, 7]),
        boxes=np.array([[[0.1, 0.25, 0.5, 1.2], [0, 0, 0.5, 0.5]], [[0, 0, 1, 1], [0, 0, 1, 1]]]),
        scores=np.array([[0.9, 0.1], [0.5, 0.5]]),
        classes=np.array([[2, 0], [0, 0]]),
        num_detections=np.array([1, 2]),
        image_sizes=np.array([[100, 200], [10, 10]]),
        coco_category_ids=[1, 2, 3],
        valid=np.array([True, False]),  # image 7 is padding
    )
    assert dets == [
        {"image_id": 42, "category_id": 3, "bbox": [50.0, 10.0, 150.0, 40.0], "score": 0.9}
    ]
    with pytest.raises(ValueError, match="out of range"):
        detections_to_coco(
            np.array([1]), np.zeros((1, 1, 4)), np.ones((1, 1)), np.array([[3]]),
            np.array([1]), np.array([[1, 1]]), [1, 2, 3],
        )  # fmt: skip


def test_format_coco_table_rounds_like_pycocotools():
    metrics = dict.fromkeys(COCO_METRIC_NAMES, 0.2735)
    metrics["ARl"] = -1.0
    lines = format_coco_table(metrics).splitlines()
    assert lines[6] == (
        " Average Recall     (AR) @[ IoU=0.50:0.95 | area=   all | maxDets=  1 ] = 0.274"
    )
    assert lines[11].endswith("area= large | maxDets=100 ] = -1.000")


def test_docstring_examples():
    result = doctest.testmod(coco_eval, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
