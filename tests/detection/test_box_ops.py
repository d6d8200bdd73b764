"""Box format helpers: area, IoU, clipping and the COCO edge conversions."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.detection import box_ops

pytestmark = pytest.mark.backend_agnostic


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_iou_hand_computed():
    a = np.array([[0.0, 0.0, 0.5, 0.5]], np.float32)  # area 0.25
    b = np.array(
        [
            [0.0, 0.0, 0.5, 0.5],  # identical: 1
            [0.25, 0.25, 0.75, 0.75],  # inter 0.25^2 = 0.0625, union 0.4375: 1/7
            [0.0, 0.25, 0.5, 0.75],  # inter 0.125, union 0.375: 1/3
            [0.6, 0.6, 0.9, 0.9],  # disjoint: 0
        ],
        np.float32,
    )
    np.testing.assert_allclose(_np(box_ops.iou(a, b)), [[1.0, 1 / 7, 1 / 3, 0.0]], rtol=1e-6)


def test_iou_degenerate_boxes_are_zero_not_nan():
    degenerate = np.array([[0.2, 0.2, 0.2, 0.2], [0.5, 0.1, 0.5, 0.9]], np.float32)
    out = _np(box_ops.iou(degenerate, degenerate))
    assert np.array_equal(out, np.zeros((2, 2)))


def test_iou_batched_rows_broadcast():
    boxes = np.array([[[0.0, 0.0, 1.0, 1.0]], [[0.0, 0.0, 0.5, 1.0]]], np.float32)  # (2, 1, 4)
    anchors = np.array([[0.0, 0.0, 1.0, 1.0]], np.float32)
    np.testing.assert_allclose(_np(box_ops.iou(boxes, anchors)), [[[1.0]], [[0.5]]])


def test_area_clip_and_validity():
    boxes = np.array([[-0.5, 0.2, 0.5, 1.5], [0.3, 0.3, 0.1, 0.9], [1.2, 1.2, 1.5, 1.5]])
    clipped = box_ops.clip(boxes, xp=np)
    np.testing.assert_allclose(clipped[0], [0.0, 0.2, 0.5, 1.0])
    # Inverted box: area 0, invalid; box entirely outside the image: degenerate after clipping.
    np.testing.assert_allclose(box_ops.area(clipped, xp=np), [0.4, 0.0, 0.0])
    assert box_ops.is_valid(clipped, xp=np).tolist() == [True, False, False]


def test_a_box_needs_both_sides_positive_to_be_valid():
    # Zero height with a positive width (a horizontal segment) and zero width with a positive
    # height (a vertical one) have area 0 and are invalid, like a point; only both sides > 0
    # make a valid box (0.8 x 0.8 = 0.64).
    boxes = np.array(
        [[0.5, 0.1, 0.5, 0.9], [0.1, 0.5, 0.9, 0.5], [0.2, 0.2, 0.2, 0.2], [0.1, 0.1, 0.9, 0.9]],
        np.float32,
    )
    assert _np(box_ops.is_valid(boxes)).tolist() == [False, False, False, True]
    np.testing.assert_allclose(_np(box_ops.area(boxes)), [0.0, 0.0, 0.0, 0.64], rtol=1e-6)


def test_coco_conversions_round_trip_and_values():
    coco = np.array([[10.0, 20.0, 30.0, 40.0], [0.0, 0.0, 200.0, 100.0]])
    boxes = box_ops.coco_to_boxes(coco, 100, 200)
    # x=10, y=20, w=30, h=40 in a 100 (h) x 200 (w) image: ymin 20/100, xmin 10/200, ...
    np.testing.assert_allclose(boxes, [[0.2, 0.05, 0.6, 0.2], [0.0, 0.0, 1.0, 1.0]])
    np.testing.assert_allclose(box_ops.boxes_to_coco(boxes, 100, 200), coco)
    np.testing.assert_allclose(
        box_ops.boxes_to_pixels(boxes, 100, 200), [[20, 10, 60, 40], [0, 0, 100, 200]]
    )


def test_conversions_with_per_image_sizes_and_keras_ops():
    boxes = np.array([[[0.5, 0.5, 1.0, 1.0]], [[0.0, 0.0, 0.5, 0.5]]], np.float32)  # (2, 1, 4)
    heights = np.array([[100.0], [10.0]], np.float32)
    widths = np.array([[50.0], [20.0]], np.float32)
    out = _np(box_ops.boxes_to_coco(boxes, heights, widths, xp=keras.ops))
    np.testing.assert_allclose(out, [[[25, 50, 25, 50]], [[0, 0, 10, 5]]])


def test_inputs_are_not_modified():
    a = np.array([[0.1, 0.1, 0.4, 0.6]], np.float32)
    b = np.array([[-0.2, 0.0, 1.4, 0.5]], np.float32)
    a0, b0 = a.copy(), b.copy()
    box_ops.iou(a, b)
    box_ops.clip(b, xp=np)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
