"""Post-processing: NMS on hand-made boxes, per-class and overall limits, padding, pixels."""

from __future__ import annotations

import numpy as np
import pytest

from cvbench.detection.postprocess import multiclass_nms, nms, postprocess

pytestmark = pytest.mark.backend_agnostic


def _logit(p):
    return np.log(p) - np.log1p(-np.asarray(p, np.float64))


def test_nms_hand_made_boxes():
    boxes = np.array(
        [
            [0.0, 0.0, 0.5, 0.5],  # A, area 0.25
            [0.0, 0.0, 0.5, 0.4],  # IoU with A = 0.2 / 0.25 = 0.8 > 0.6: dropped
            [0.0, 0.0, 0.5, 0.3],  # IoU with A = 0.15 / 0.25 = 0.6, not above 0.6: kept
            [0.6, 0.6, 0.9, 0.9],  # disjoint: kept
        ]
    )
    scores = np.array([0.9, 0.8, 0.7, 0.95])
    assert nms(boxes, scores, iou_threshold=0.6, max_output=10).tolist() == [3, 0, 2]
    assert nms(boxes, scores, iou_threshold=0.6, max_output=2).tolist() == [3, 0]
    # Box 2 vs box 1 (IoU 0.75) does not matter: box 1 was dropped before it could suppress.
    assert nms(boxes, scores, iou_threshold=0.5, max_output=10).tolist() == [3, 0]
    assert nms(boxes[:0], scores[:0], iou_threshold=0.6, max_output=10).tolist() == []


def test_nms_iou_of_boxes_away_from_the_origin():
    # A: 0.4 high, 0.3 wide (area 0.12); B: 0.4 high, 0.4 wide (area 0.16); no coordinate is 0
    # and no two are equal, so every corner enters the IoU. Overlap: y [0.3, 0.6] x [0.2, 0.4]
    # = 0.3 * 0.2 = 0.06; IoU = 0.06 / (0.12 + 0.16 - 0.06) = 3 / 11 = 0.2727.
    boxes = np.array([[0.2, 0.1, 0.6, 0.4], [0.3, 0.2, 0.7, 0.6]])
    for scores in ([0.9, 0.8], [0.8, 0.9]):  # either box on top: the IoU is symmetric
        top = int(np.argmax(scores))
        scores = np.array(scores)
        assert nms(boxes, scores, iou_threshold=0.26, max_output=5).tolist() == [top]
        assert nms(boxes, scores, iou_threshold=0.28, max_output=5).tolist() == [top, 1 - top]


def test_multiclass_nms_per_class_threshold_and_total():
    boxes = np.array([[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.5, 0.4], [0.5, 0.5, 1.0, 1.0]])
    scores = np.array(
        [
            [0.9, 0.3, 1e-8],  # class 2 at exactly the threshold: not a candidate
            [0.8, 0.6, 0.0],
            [0.1, 0.2, 0.5],
        ]
    )
    out_boxes, out_scores, out_classes = multiclass_nms(boxes, scores, score_threshold=1e-8)
    # Class 0: boxes 0 (0.9), 2 (0.1); box 1 suppressed by box 0 (IoU 0.8).
    # Class 1: box 1 (0.6) first, then box 0 (0.3) suppressed by it, box 2 (0.2) kept.
    # Class 2: box 2 (0.5); box 1 scores 0 and box 0 exactly 1e-8: not candidates.
    np.testing.assert_allclose(out_scores, [0.9, 0.6, 0.5, 0.2, 0.1])
    assert out_classes.tolist() == [0, 1, 2, 1, 0]
    np.testing.assert_allclose(out_boxes, boxes[[0, 1, 2, 2, 2]])
    _, top_scores, top_classes = multiclass_nms(boxes, scores, max_total=2)
    np.testing.assert_allclose(top_scores, [0.9, 0.6])
    _, per_class, _ = multiclass_nms(boxes, scores, max_per_class=1)
    np.testing.assert_allclose(per_class, [0.9, 0.6, 0.5])


def test_multiclass_nms_default_score_threshold():
    # Defaults: score_threshold 1e-8 (strict). 5e-9 is below it, 1e-8 is not above it, 2e-8 is.
    boxes = np.array([[0.0, 0.0, 0.2, 0.2], [0.4, 0.4, 0.6, 0.6], [0.8, 0.8, 1.0, 1.0]])
    _, kept, classes = multiclass_nms(boxes, np.array([[5e-9], [1e-8], [2e-8]]))
    assert kept.tolist() == [2e-8] and classes.tolist() == [0]


def test_equal_scores_lower_class_first_then_lower_anchor():
    # Three disjoint boxes, every score 0.5 in both classes: class 0's anchors 0, 1, 2, then
    # class 1's; a cut at max_total = 4 keeps class 0's three and class 1's anchor 0.
    boxes = np.array([[0.0, 0.0, 0.2, 0.2], [0.4, 0.4, 0.6, 0.6], [0.8, 0.8, 1.0, 1.0]])
    scores = np.full((3, 2), 0.5)
    out_boxes, _, classes = multiclass_nms(boxes, scores)
    assert classes.tolist() == [0, 0, 0, 1, 1, 1]
    np.testing.assert_array_equal(out_boxes, boxes[[0, 1, 2, 0, 1, 2]])
    out_boxes, _, classes = multiclass_nms(boxes, scores, max_total=4)
    assert classes.tolist() == [0, 0, 0, 1]
    np.testing.assert_array_equal(out_boxes, boxes[[0, 1, 2, 0]])


def test_multiclass_nms_ranks_negative_scores():
    # Logits as scores (score_threshold -inf): the same detections as their sigmoids. Disjoint
    # boxes, max_total 2. Class 0 (best -1) fills the two slots with -1 and -2 (-5 is cut);
    # class 1 (best -1.5) is above the lowest kept score -2, so its anchor 2 replaces it.
    boxes = np.array([[0.0, 0.0, 0.2, 0.2], [0.4, 0.4, 0.6, 0.6], [0.8, 0.8, 1.0, 1.0]])
    logits = np.array([[-1.0, -3.0], [-2.0, -4.0], [-5.0, -1.5]])
    out_boxes, kept, classes = multiclass_nms(boxes, logits, score_threshold=-np.inf, max_total=2)
    assert kept.tolist() == [-1.0, -1.5] and classes.tolist() == [0, 1]
    np.testing.assert_array_equal(out_boxes, boxes[[0, 2]])
    probabilities = 1.0 / (1.0 + np.exp(-logits))
    _, kept_p, classes_p = multiclass_nms(boxes, probabilities, score_threshold=0.0, max_total=2)
    np.testing.assert_allclose(kept_p, probabilities[[0, 2], [0, 1]])
    assert classes_p.tolist() == [0, 1]


def test_pruned_search_equals_brute_force():
    rng = np.random.default_rng(3)
    corner = rng.uniform(0, 0.8, (300, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(0.05, 0.3, (300, 2))], -1)
    scores = rng.uniform(0, 1, (300, 6)) ** 4
    got_boxes, got_scores, got_classes = multiclass_nms(
        boxes, scores, iou_threshold=0.5, max_per_class=7, max_total=20
    )
    everything = []
    for c in range(6):
        for i in nms(boxes, scores[:, c], iou_threshold=0.5, max_output=7):
            everything.append((scores[i, c], c, i))
    everything.sort(key=lambda t: -t[0])
    expected = everything[:20]
    np.testing.assert_allclose(got_scores, [t[0] for t in expected])
    assert got_classes.tolist() == [t[1] for t in expected]
    np.testing.assert_allclose(got_boxes, boxes[[t[2] for t in expected]])


def test_postprocess_decodes_clips_and_pads():
    anchors = np.array([[-0.2, 0.0, 0.4, 0.5], [0.5, 0.5, 1.0, 1.0], [0.0, 0.5, 0.5, 1.0]])
    codes = np.zeros((2, 3, 4), np.float32)
    codes[1, 1] = [10.0, 0.0, 0.0, 0.0]  # ty = 10 -> centre moves down one anchor height (0.5)
    # sigmoid(-30) = 9.4e-14, and 0.0 exactly in float32 (0.5 * (1 + tanh(-15))): no box.
    logits = np.full((2, 3, 2), -30.0, np.float32)
    logits[0, 0, 1] = _logit(0.7)
    logits[0, 2, 0] = _logit(0.4)
    logits[1, 1, 0] = np.nan  # NaN scores are never candidates
    logits[1, 1, 1] = _logit(0.9)
    out = postprocess(codes, logits, anchors, max_total=3)
    assert out["boxes"].shape == (2, 3, 4) and out["num_detections"].tolist() == [2, 1]
    np.testing.assert_allclose(out["scores"], [[0.7, 0.4, 0.0], [0.9, 0.0, 0.0]], rtol=1e-6)
    assert out["classes"].tolist() == [[1, 0, -1], [1, -1, -1]]
    # Anchor 0 reaches above the image: clipped to ymin 0. Image 1: [1.0, 0.5, 1.5, 1.0]
    # clipped to [1.0, 0.5, 1.0, 1.0] (zero area, kept).
    np.testing.assert_allclose(
        out["boxes"][0], [[0.0, 0.0, 0.4, 0.5], [0.0, 0.5, 0.5, 1.0], [0, 0, 0, 0]], atol=1e-6
    )
    np.testing.assert_allclose(out["boxes"][1, 0], [1.0, 0.5, 1.0, 1.0], atol=1e-6)
    with pytest.raises(ValueError, match="anchors must have shape"):
        postprocess(codes, logits, anchors[:2])
    with pytest.raises(ValueError, match="need box codes"):
        postprocess(codes[0], logits, anchors)


def test_postprocess_infinite_codes_give_finite_boxes():
    anchors = np.array([[0.2, 0.2, 0.4, 0.4]])
    codes = np.array([[[0.0, 0.0, np.inf, 1e4]]], np.float32)
    out = postprocess(codes, np.zeros((1, 1, 1), np.float32), anchors)
    np.testing.assert_allclose(out["boxes"][0, 0], [0.0, 0.0, 1.0, 1.0])
