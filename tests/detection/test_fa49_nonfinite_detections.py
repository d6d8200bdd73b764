"""A NaN model output is never a detection, and COCO evaluation refuses a non-finite one
(probe fa49 #1: pycocotools scored a NaN box as a perfect match, AP 1.0, faster-coco-eval
as nothing, AP 0.0)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cvbench.detection.coco_eval import detections_to_coco, evaluate_coco
from cvbench.detection.postprocess import postprocess
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic

BACKENDS = ("pycocotools", "faster")
GT = {
    "images": [{"id": 1, "width": 100, "height": 80}],
    "categories": [{"id": 18, "name": "dog"}],
    "annotations": [
        {"id": 1, "image_id": 1, "category_id": 18, "iscrowd": 0, "bbox": [10, 10, 40, 30],
         "area": 1200}
    ],
}  # fmt: skip
NAN, INF = float("nan"), float("inf")


def _logit(p):
    return float(np.log(p) - np.log1p(-p))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("bbox", "score", "shown"),
    [
        ([NAN, NAN, NAN, NAN], 0.9, "bbox must be finite, got [nan, nan, nan, nan]"),
        ([10, 10, INF, 30], 0.9, "bbox must be finite, got [10.0, 10.0, inf, 30.0]"),
        ([10, 10, 40, 30], NAN, "score must be finite, got nan"),
        ([10, 10, 40, 30], -INF, "score must be finite, got -inf"),
    ],
)
def test_evaluate_coco_refuses_a_non_finite_detection(backend, bbox, score, shown):
    good = {"image_id": 1, "category_id": 18, "bbox": [10, 10, 40, 30], "score": 0.5}
    bad = {"image_id": 1, "category_id": 18, "bbox": bbox, "score": score}
    with pytest.raises(ValueError) as info:
        evaluate_coco([good, bad], GT, print_fn=None, backend=backend)
    assert str(info.value) == f"detection 1 (image 1): {shown}"  # index 1: the second


def test_a_detections_file_with_nan_is_a_bad_file(tmp_path):
    path = tmp_path / "dets.json"  # Python's json writes (and reads) the bare NaN
    path.write_text(json.dumps([{"image_id": 1, "category_id": 18, "bbox": [NAN] * 4, "score": 1}]))
    with pytest.raises(BadFileError, match=r"dets\.json: detection 0 \(image 1\): bbox must be"):
        evaluate_coco(path, GT, print_fn=None)


def _outputs(batch: int):
    """Two anchors, one class: anchor 0 with NaN box codes and the top score (0.993, what
    the probe saw), anchor 1 with zero codes (its box is the anchor) scoring 0.6."""
    anchors = np.array([[0.0, 0.0, 0.5, 0.5], [0.125, 0.1, 0.5, 0.5]], np.float32)
    codes = np.zeros((batch, 2, 4), np.float32)
    codes[:, 0] = NAN
    logits = np.array([[[_logit(0.993)], [_logit(0.6)]]] * batch, np.float32)
    return codes, logits, anchors


@pytest.mark.parametrize("batch", [1, 2])
def test_postprocess_drops_a_nan_box_before_nms(batch):
    codes, logits, anchors = _outputs(batch)
    out = postprocess(codes, logits, anchors, max_total=3)
    assert out["num_detections"].tolist() == [1] * batch
    assert out["nan_anchors"].tolist() == [1] * batch  # anchor 0
    np.testing.assert_allclose(out["scores"][:, 0], 0.6, rtol=1e-6)
    np.testing.assert_allclose(out["boxes"][:, 0], [[0.125, 0.1, 0.5, 0.5]] * batch, atol=1e-6)
    assert np.isfinite(out["boxes"]).all() and out["classes"][:, 0].tolist() == [0] * batch


def test_postprocess_counts_nan_scores_and_no_nan_anchor_when_all_finite():
    codes, logits, anchors = _outputs(1)
    codes[:] = 0.0
    assert postprocess(codes, logits, anchors)["nan_anchors"].tolist() == [0]
    logits[0, 1, 0] = NAN  # a NaN score is never a candidate: only anchor 0 is left
    out = postprocess(codes, logits, anchors)
    assert out["nan_anchors"].tolist() == [1] and out["num_detections"].tolist() == [1]
    np.testing.assert_allclose(out["scores"][0, 0], 0.993, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nan_box_code_is_no_match_in_either_backend(backend):
    # The NaN anchor's box would have been the 0.993 detection; the kept one (anchor 1,
    # [0.125, 0.1, 0.5, 0.5] of 80 x 100 = x 10, y 10, w 40, h 30) is the ground truth box.
    out = postprocess(*_outputs(1))
    dets = detections_to_coco(
        np.array([1]), out["boxes"], out["scores"], out["classes"], out["num_detections"],
        np.array([[80, 100]]), [18],
    )  # fmt: skip
    assert len(dets) == 1 and dets[0]["score"] == pytest.approx(0.6)
    np.testing.assert_allclose(dets[0]["bbox"], [10, 10, 40, 30], atol=1e-4)
    metrics = evaluate_coco(dets, GT, print_fn=None, backend=backend)
    assert metrics["AP"] == pytest.approx(1.0)  # the one real box, found exactly


@pytest.mark.parametrize("batch", [1, 3])
def test_predict_coco_warns_once_with_the_count_of_nan_anchors(batch):
    from cvbench.detection.predict import predict_coco
    from tests.inference_models import constant_detector, detector_info

    model = constant_detector()  # 4 disjoint quarter anchors, 2 classes, every score > 1e-8
    codes = model.get_layer("codes")
    bias = np.zeros(16, np.float32)
    bias[:4] = NAN  # anchor 0's box codes (its class 1 scores 0.880797, the best)
    codes.set_weights([codes.get_weights()[0], bias])
    images = np.zeros((batch, 64, 64, 3), np.float32)
    valid = np.arange(batch) < max(batch - 1, 1)  # the last of 3 is padding: not counted
    meta = {"image_id": np.arange(1, batch + 1), "image_size": np.full((batch, 2), 64),
            "valid": valid}  # fmt: skip
    settings = detector_info().detection
    with pytest.warns(UserWarning) as record:
        dets, ids = predict_coco(model, [(images, meta)] * 2, [18, 19], settings=settings)
    real = 2 * int(valid.sum())  # two batches
    messages = [str(w.message) for w in record if "NaN" in str(w.message)]
    assert messages == [
        f"{real} anchor(s) of {real} image(s) gave NaN box or class outputs: dropped, never "
        "detections (the model's outputs are broken)"
    ]
    # anchors 1, 2, 3 x 2 classes, disjoint: 6 detections an image; anchor 0's are gone
    assert len(dets) == 6 * real and len(ids) == real
    assert all(np.isfinite(d["bbox"]).all() for d in dets)
    assert max(d["score"] for d in dets) == pytest.approx(0.731059, abs=1e-6)  # sigmoid(1)
