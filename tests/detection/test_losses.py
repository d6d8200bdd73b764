"""Focal and smooth-L1 losses: hand-computed values, normalization, non-finite inputs."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from cvbench.detection.losses import (
    SSDBoxLoss,
    SSDClassLoss,
    SSDLoss,
    box_loss,
    class_loss,
    num_positives,
    sigmoid_focal_loss,
    smooth_l1_loss,
)

pytestmark = pytest.mark.backend_agnostic

LN2 = math.log(2.0)


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _focal_reference(t: float, x: float, alpha: float = 0.25, gamma: float = 2.0) -> float:
    p = 1.0 / (1.0 + math.exp(-x))
    ce = -(t * math.log(p) + (1 - t) * math.log(1 - p))
    p_t = t * p + (1 - t) * (1 - p)
    return (alpha * t + (1 - alpha) * (1 - t)) * (1 - p_t) ** gamma * ce


def test_focal_hand_computed():
    targets = np.array([1.0, 0.0, 1.0, 0.0, 0.0], np.float32)
    logits = np.array([0.0, 0.0, 2.0, -4.6, 100.0], np.float32)
    out = _np(sigmoid_focal_loss(targets, logits))
    # x = 0: p = 0.5, CE = ln 2, (1 - p_t)^2 = 0.25 -> 0.25 * 0.25 * ln 2 and 0.75 * 0.25 * ln 2.
    assert out[0] == pytest.approx(0.0625 * LN2, rel=1e-6)
    assert out[1] == pytest.approx(0.1875 * LN2, rel=1e-6)
    assert out[2] == pytest.approx(_focal_reference(1.0, 2.0), rel=1e-5)  # ~4.509e-4
    assert out[3] == pytest.approx(_focal_reference(0.0, -4.6), rel=1e-5)
    # x = 100, t = 0: p = 1 in float32, CE = softplus(100) = 100, weight 0.75 -> 75 exactly.
    assert out[4] == pytest.approx(75.0, rel=1e-6)


def test_focal_alpha_gamma_arguments():
    out = _np(sigmoid_focal_loss(np.array([1.0]), np.array([0.0]), alpha=0.5, gamma=0.0))
    assert out[0] == pytest.approx(0.5 * LN2, rel=1e-6)  # gamma 0: alpha-weighted BCE


def test_focal_soft_targets():
    # t = 0.5, x = 0: CE = 0.5 ln 2 + 0.5 ln 2 = ln 2, 1 - p_t = 0.5 * 0.5 + 0.5 * 0.5 = 0.5,
    # a_t = 0.25 * 0.5 + 0.75 * 0.5 = 0.5 -> 0.5 * 0.5**2 * ln 2 = 0.125 ln 2.
    targets = np.array([0.5, 0.25], np.float32)
    out = _np(sigmoid_focal_loss(targets, np.array([0.0, 1.5], np.float32)))
    assert out[0] == pytest.approx(0.125 * LN2, rel=1e-6)
    assert out[1] == pytest.approx(_focal_reference(0.25, 1.5), rel=1e-5)  # ~0.3598


def test_focal_non_finite_logits():
    targets = np.array([1.0, 0.0, 1.0, 0.0, 1.0], np.float32)
    logits = np.array([np.inf, -np.inf, -np.inf, np.inf, np.nan], np.float32)
    out = _np(sigmoid_focal_loss(targets, logits))
    # Agreeing infinities cost 0, contradicting ones +inf, NaN stays NaN.
    assert out[0] == 0.0 and out[1] == 0.0
    assert np.isposinf(out[2]) and np.isposinf(out[3]) and np.isnan(out[4])


def test_smooth_l1_values():
    pred = np.array([0.5, 2.0, -3.0, 1.0], np.float32)
    target = np.array([0.0, 0.0, 0.0, 1.0], np.float32)
    # |d| = 0.5 -> 0.5 * 0.25; |d| = 2 -> 2 - 0.5; |d| = 3 -> 3 - 0.5; d = 0 -> 0.
    np.testing.assert_allclose(_np(smooth_l1_loss(target, pred)), [0.125, 1.5, 2.5, 0.0])
    np.testing.assert_allclose(_np(smooth_l1_loss(target, pred, delta=2.0)), [0.125, 2.0, 4.0, 0])


def _y_true_boxes():
    y = np.zeros((2, 3, 5), np.float32)
    y[0, 0] = [1.0, 0.0, 0.0, 0.0, 1.0]  # positive, code ty = 1
    y[1, 2] = [0.0, 0.0, 3.0, 0.0, 1.0]  # positive, code th = 3
    y[1, 1] = [0.0, 0.0, 0.0, 0.0, 1.0]  # positive, code 0
    return y


def test_box_loss_normalized_by_batch_positives_and_code_size():
    y_true = _y_true_boxes()
    y_pred = np.zeros((2, 3, 4), np.float32)
    y_pred[0, 1] = [50.0, 50.0, 50.0, 50.0]  # negative anchor: no loss
    # Image 0: smooth L1 of 1 = 0.5; image 1: of 3 = 2.5; matched anchors in the batch: 3.
    # Total = (0.5 + 2.5) / 3 / 4 = 0.25 ("sum" reduction of per-image values).
    assert float(SSDBoxLoss()(y_true, y_pred)) == pytest.approx(0.25, rel=1e-6)
    assert float(SSDBoxLoss(code_size_normalize=False)(y_true, y_pred)) == pytest.approx(1.0)


def test_class_loss_normalized_and_zero_positives():
    y_true = np.zeros((1, 2, 3), np.float32)  # 2 classes + weight
    y_true[0, :, 2] = 1.0  # both anchors background, weight 1
    logits = np.zeros((1, 2, 2), np.float32)
    # No positives: normalizer max(1, 0) = 1; 4 background entries at x = 0: 4 * 0.1875 ln 2.
    assert float(SSDClassLoss()(y_true, logits)) == pytest.approx(0.75 * LN2, rel=1e-6)
    y_true[0, 0, 1] = 1.0  # anchor 0 is class 1: one positive
    expected = (3 * 0.1875 + 0.0625) * LN2 / 1
    assert float(SSDClassLoss()(y_true, logits)) == pytest.approx(expected, rel=1e-6)
    # Two positives in the batch halve the loss of the same entries.
    y2 = np.concatenate([y_true, y_true])
    l2 = np.concatenate([logits, logits])
    assert float(SSDClassLoss()(y2, l2)) == pytest.approx(2 * expected / 2, rel=1e-6)


def test_num_positives_floor_is_one():
    y_true = np.zeros((2, 3, 5), np.float32)
    assert float(num_positives(y_true)) == 1.0  # max(1, 0)
    y_true[1, 2] = [3.0, 0.0, 0.0, 0.0, 1.0]  # one matched anchor, code ty = 3
    assert float(num_positives(y_true)) == 1.0  # max(1, 1)
    assert float(num_positives(_y_true_boxes())) == 3.0
    # One positive: smooth L1 of 3 = 3 - 0.5 = 2.5, / 1 / 4 = 0.625.
    assert float(SSDBoxLoss()(y_true, np.zeros((2, 3, 4), np.float32))) == pytest.approx(0.625)


def test_box_and_class_loss_function_defaults():
    # box_loss: delta 1, divided by 4. One positive, |d| = 3: 2.5 / 1 / 4 = 0.625 per image 1.
    y_true = np.zeros((2, 3, 5), np.float32)
    y_true[1, 2] = [3.0, 0.0, 0.0, 0.0, 1.0]
    np.testing.assert_allclose(_np(box_loss(y_true, np.zeros((2, 3, 4)))), [0.0, 0.625])
    # class_loss: alpha 0.25, gamma 2. One anchor of class 0 (weight 1), logits 0:
    # 0.25 * 0.5**2 * ln 2 (positive) + 0.75 * 0.5**2 * ln 2 (negative), / 1 = 0.25 ln 2.
    y_classes = np.array([[[1.0, 0.0, 1.0]]], np.float32)
    out = _np(class_loss(y_classes, np.zeros((1, 1, 2), np.float32)))
    np.testing.assert_allclose(out, [0.25 * LN2], rtol=1e-6)


def test_zero_positives_box_loss_is_zero():
    y_true = np.zeros((2, 3, 5), np.float32)
    assert float(SSDBoxLoss()(y_true, np.ones((2, 3, 4), np.float32))) == 0.0


def test_weight_zero_entries_ignore_non_finite_predictions():
    y_true_boxes = _y_true_boxes()
    box_pred = np.zeros((2, 3, 4), np.float32)
    box_pred[0, 1] = np.nan  # negative anchor
    box_pred[0, 2] = np.inf
    assert float(SSDBoxLoss()(y_true_boxes, box_pred)) == pytest.approx(0.25, rel=1e-6)
    y_true_classes = np.array([[[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]], np.float32)  # anchor 1 ignored
    logits = np.array([[[0.0, 0.0], [np.nan, np.inf]]], np.float32)
    expected = (0.1875 + 0.0625) * LN2  # anchor 0 only; one positive
    assert float(SSDClassLoss()(y_true_classes, logits)) == pytest.approx(expected, rel=1e-6)


def test_ssd_loss_is_the_sum_and_accepts_tuples():
    y_true = {"boxes": _y_true_boxes(), "classes": np.zeros((2, 3, 3), np.float32)}
    y_true["classes"][..., 2] = 1.0
    y_true["classes"][0, 0, 0] = y_true["classes"][1, 1, 1] = y_true["classes"][1, 2, 0] = 1.0
    y_pred = {"boxes": np.zeros((2, 3, 4), np.float32), "classes": np.zeros((2, 3, 2), np.float32)}
    box = float(SSDBoxLoss()(y_true["boxes"], y_pred["boxes"]))
    cls = float(SSDClassLoss()(y_true["classes"], y_pred["classes"]))
    # 12 class entries at x = 0: 3 positives (0.0625 ln 2), 9 negatives (0.1875 ln 2), / 3.
    assert cls == pytest.approx((3 * 0.0625 + 9 * 0.1875) * LN2 / 3, rel=1e-6)
    total = float(SSDLoss()(y_true, y_pred))
    assert total == pytest.approx(box + cls, rel=1e-6)
    as_tuples = float(
        SSDLoss(box_weight=2.0)(
            (y_true["boxes"], y_true["classes"]), (y_pred["boxes"], y_pred["classes"])
        )
    )
    assert as_tuples == pytest.approx(2 * box + cls, rel=1e-6)


@pytest.mark.parametrize(
    "loss",
    [SSDBoxLoss(delta=2.0), SSDClassLoss(alpha=0.5, gamma=1.0), SSDLoss(gamma=3.0, box_weight=2)],
)
def test_get_config_round_trip(loss):
    config = loss.get_config()
    clone = type(loss).from_config(config)
    assert clone.get_config() == config
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert type(restored) is type(loss) and restored.get_config() == config


def test_focal_argument_boundaries_are_allowed():
    # One anchor of class 0 among 3 classes (weight 1), logits 0; gamma 0: alpha-weighted BCE.
    # alpha 1: the positive entry alone, ln 2; alpha 0: the two negative entries, 2 ln 2.
    y_true = np.array([[[1.0, 0.0, 0.0, 1.0]]], np.float32)
    logits = np.zeros((1, 1, 3), np.float32)
    assert float(SSDClassLoss(alpha=1.0, gamma=0.0)(y_true, logits)) == pytest.approx(LN2)
    assert float(SSDClassLoss(alpha=0.0, gamma=0.0)(y_true, logits)) == pytest.approx(2 * LN2)


def test_bad_focal_arguments():
    with pytest.raises(ValueError, match="alpha must be in"):
        SSDClassLoss(alpha=1.5)
    with pytest.raises(ValueError, match="gamma must be >= 0"):
        SSDClassLoss(gamma=-1.0)
