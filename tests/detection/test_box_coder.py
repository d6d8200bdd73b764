"""Faster R-CNN box coder (scales 10, 10, 5, 5): values and the encode/decode inverse."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from cvbench.detection import box_coder

pytestmark = pytest.mark.backend_agnostic


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_encode_hand_computed():
    anchor = np.array([[0.0, 0.0, 0.5, 0.25]], np.float32)  # centre (0.25, 0.125), 0.5 x 0.25
    box = np.array([[0.1, 0.05, 0.5, 0.45]], np.float32)  # centre (0.3, 0.25), 0.4 x 0.4
    # ty = 10 * (0.3 - 0.25) / 0.5 = 1; tx = 10 * (0.25 - 0.125) / 0.25 = 5;
    # th = 5 * log(0.4 / 0.5); tw = 5 * log(0.4 / 0.25)  (the 1e-8 epsilon is below rounding).
    expected = [1.0, 5.0, 5 * math.log(0.8), 5 * math.log(1.6)]
    np.testing.assert_allclose(_np(box_coder.encode(box, anchor)), [expected], rtol=1e-5)


def test_identity_box_encodes_to_zero():
    anchors = np.array([[0.1, 0.2, 0.3, 0.6], [-0.2, -0.1, 0.4, 0.9]], np.float32)
    np.testing.assert_allclose(_np(box_coder.encode(anchors, anchors)), 0.0, atol=1e-6)


def test_round_trip_both_ways():
    rng = np.random.default_rng(0)

    def random_boxes():
        corner = rng.uniform(-0.2, 1.0, (64, 2))
        return np.concatenate([corner, corner + rng.uniform(0.01, 1.0, (64, 2))], axis=-1)

    anchors, boxes = random_boxes(), random_boxes()
    codes = box_coder.encode(boxes, anchors, xp=np)
    np.testing.assert_allclose(box_coder.decode(codes, anchors, xp=np), boxes, atol=1e-12)
    codes2 = rng.normal(size=(3, 64, 4))  # batched codes, anchors broadcast
    back = box_coder.encode(box_coder.decode(codes2, anchors, xp=np), anchors, xp=np)
    np.testing.assert_allclose(back, codes2, atol=1e-9)


def test_round_trip_float32_keras_ops():
    anchors = np.array([[0.1, 0.1, 0.3, 0.5], [0.5, 0.0, 1.0, 0.2]], np.float32)
    boxes = np.array([[0.15, 0.05, 0.35, 0.4], [0.4, 0.05, 0.9, 0.3]], np.float32)
    back = box_coder.decode(box_coder.encode(boxes, anchors), anchors)
    np.testing.assert_allclose(_np(back), boxes, atol=1e-6)


def test_degenerate_box_gives_finite_code():
    anchor = np.array([[0.0, 0.0, 0.5, 0.5]], np.float32)
    point = np.array([[0.25, 0.25, 0.25, 0.25]], np.float32)
    codes = _np(box_coder.encode(point, anchor))
    # th = 5 * log(1e-8 / (0.5 + 1e-8)) = 5 * log(2e-8) ~ -88.6: large but finite.
    assert np.all(np.isfinite(codes))
    np.testing.assert_allclose(codes[0, 2], 5 * math.log(2e-8), rtol=1e-4)


def test_custom_scales_and_bad_scales():
    anchor = np.array([[0.0, 0.0, 1.0, 1.0]])
    box = np.array([[0.1, 0.0, 1.1, 1.0]])  # shifted down by 0.1
    codes = box_coder.encode(box, anchor, scales=(1, 1, 1, 1), xp=np)
    np.testing.assert_allclose(codes, [[0.1, 0.0, 0.0, 0.0]], atol=1e-7)
    with pytest.raises(ValueError, match="scales must be 4 positive numbers"):
        box_coder.encode(box, anchor, scales=(10, 10, 5), xp=np)
    with pytest.raises(ValueError, match="scales must be 4 positive numbers"):
        box_coder.decode(codes, anchor, scales=(10, 10, 5, 0), xp=np)
