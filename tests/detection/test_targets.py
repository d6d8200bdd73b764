"""Target encoding: y_true layout, padding, clipping, ignored anchors, tf.data encoder.

The hand-computed cases run twice: `encode_targets` on `keras.ops`, and `TargetEncoder` called
eagerly on one example (its plain-TensorFlow namespace, the code that tf.data runs traced).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.detection import box_coder
from cvbench.detection.anchors import multiscale_anchors
from cvbench.detection.targets import (
    PADDING_LABEL,
    TargetEncoder,
    encode_targets,
    tf_array_namespace,
)

# Four anchors, the quadrants of the image.
ANCHORS = np.array(
    [[0.0, 0.0, 0.5, 0.5], [0.0, 0.5, 0.5, 1.0], [0.5, 0.0, 1.0, 0.5], [0.5, 0.5, 1.0, 1.0]],
    np.float32,
)


@pytest.fixture(params=["encode_targets", "TargetEncoder"])
def encode(request):
    """`encode(boxes, labels, anchors=ANCHORS, **kwargs)` -> numpy y_true, either way."""

    def run(boxes, labels, *, anchors=ANCHORS, num_classes, **thresholds):
        boxes, labels = np.asarray(boxes, np.float32), np.asarray(labels, np.int32)
        if request.param == "encode_targets":
            out = encode_targets(anchors, boxes, labels, num_classes=num_classes, **thresholds)
            return {k: keras.ops.convert_to_numpy(v) for k, v in out.items()}
        out = TargetEncoder(anchors, num_classes, **thresholds)(boxes, labels)  # eager, (M, 4)
        return {k: v.numpy() for k, v in out.items()}

    return run


@pytest.mark.backend_agnostic
def test_layout_values_and_padding(encode):
    assert PADDING_LABEL == -1  # the documented padding label
    boxes = [
        [0.0, 0.0, 0.5, 0.4],  # IoU 0.8 with anchor 0
        [0.5, 0.5, 1.0, 1.0],  # anchor 3 exactly
        [0.0, 0.0, 0.0, 0.0],  # padding row (zero box, label -1)
        [0.0, 0.5, 0.5, 1.0],  # anchor 1 exactly, but label 3 = num_classes: ignored
    ]
    y = encode(boxes, [2, 0, PADDING_LABEL, 3], num_classes=3)
    assert y["boxes"].shape == (4, 5) and y["classes"].shape == (4, 4)
    assert y["boxes"].dtype == np.float32 and y["classes"].dtype == np.float32
    # Positive mask (column 4): anchors 0 and 3.
    np.testing.assert_array_equal(y["boxes"][:, 4], [1, 0, 0, 1])
    # Anchor 0's code: the box is 0.4 wide vs 0.5: tw = 5 * log(0.4 / 0.5), centre x shifted
    # by -0.05: tx = 10 * -0.05 / 0.5 = -1.
    expected = keras.ops.convert_to_numpy(box_coder.encode(np.array(boxes[:1]), ANCHORS[:1]))
    np.testing.assert_allclose(y["boxes"][0, :4], expected[0], atol=1e-5)
    np.testing.assert_allclose(y["boxes"][0, :4], [0, -1, 0, 5 * np.log(0.8)], atol=1e-5)
    np.testing.assert_allclose(y["boxes"][3, :4], 0.0, atol=1e-6)  # identical box: zero code
    np.testing.assert_array_equal(y["boxes"][1:3], 0.0)  # background: zero codes
    # One-hot classes (label 2 at anchor 0, label 0 at anchor 3), background all zeros, and
    # the classification weight 1 everywhere (no ignored anchors at thresholds 0.5/0.5).
    np.testing.assert_array_equal(
        y["classes"], [[0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 1], [1, 0, 0, 1]]
    )


@pytest.mark.backend_agnostic
def test_image_without_boxes(encode):
    y = encode(np.zeros((0, 4)), np.zeros((0,), np.int32), num_classes=2)
    np.testing.assert_array_equal(y["boxes"], 0.0)
    np.testing.assert_array_equal(y["classes"], [[0, 0, 1]] * 4)


@pytest.mark.backend_agnostic
def test_only_padding_rows(encode):
    y = encode(np.zeros((3, 4)), [-1, -1, -1], num_classes=2)
    np.testing.assert_array_equal(y["boxes"][:, 4], 0.0)
    np.testing.assert_array_equal(y["classes"][:, :2], 0.0)


@pytest.mark.backend_agnostic
def test_boxes_outside_the_image_are_clipped_or_dropped(encode):
    # Clipped to [0, 0, 0.5, 0.5] = anchor 0 exactly (zero code); the second box lies entirely
    # below the image, clips to zero height and is ignored.
    y = encode([[-0.5, -0.5, 0.5, 0.5], [1.2, 0.0, 1.6, 0.5]], [1, 0], num_classes=2)
    np.testing.assert_array_equal(y["boxes"][:, 4], [1, 0, 0, 0])
    np.testing.assert_allclose(y["boxes"][0, :4], 0.0, atol=1e-6)


@pytest.mark.backend_agnostic
def test_small_box_still_forced_onto_its_best_anchor(encode):
    # IoU with anchor 3 = 0.01 / 0.25 = 0.04 < 0.5, matched anyway (force_match_for_each_row).
    y = encode([[0.7, 0.7, 0.8, 0.8]], [1], num_classes=2)
    np.testing.assert_array_equal(y["boxes"][:, 4], [0, 0, 0, 1])
    np.testing.assert_array_equal(y["classes"][3], [0, 1, 1])


@pytest.mark.backend_agnostic
def test_ignored_anchors_get_zero_class_weight(encode):
    anchors = np.array([[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.5, 0.225], [0.5, 0.5, 1.0, 1.0]])
    # IoU of the box with the anchors: 1 (matched), 0.1125 / 0.25 = 0.45 (in [0.4, 0.5):
    # ignored), 0 (background). One class: the smallest num_classes allowed.
    y = encode([[0.0, 0.0, 0.5, 0.5]], [0], anchors=anchors, num_classes=1,
               unmatched_threshold=0.4)  # fmt: skip
    np.testing.assert_array_equal(y["classes"], [[1, 1], [0, 0], [0, 1]])
    np.testing.assert_array_equal(y["boxes"][:, 4], [1, 0, 0])


@pytest.mark.backend_agnostic
def test_inputs_not_modified_and_bad_arguments():
    boxes = np.array([[-0.1, 0.1, 0.6, 0.6]], np.float32)
    labels = np.array([1])
    before = boxes.copy()
    encode_targets(ANCHORS, boxes, labels, num_classes=2)
    assert np.array_equal(boxes, before) and labels.tolist() == [1]
    with pytest.raises(ValueError, match="num_classes must be an int >= 1; got 0"):
        encode_targets(ANCHORS, boxes, labels, num_classes=0)
    with pytest.raises(ValueError, match="anchors must have shape"):
        TargetEncoder(ANCHORS[:, :3], num_classes=2)
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match=f"num_classes must be an int >= 1; got {bad!r}"):
            TargetEncoder(ANCHORS, num_classes=bad)
    with pytest.raises(ValueError, match="must not exceed"):
        TargetEncoder(ANCHORS, num_classes=2, unmatched_threshold=0.7)


@pytest.mark.backend_agnostic
def test_tf_array_namespace_numpy_defaults():
    # stack and concatenate default to axis 0, as numpy's.
    xp = tf_array_namespace()
    a, b = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    np.testing.assert_array_equal(xp.stack([a, b]).numpy(), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(xp.concatenate([a, b]).numpy(), [1, 2, 3, 4])


def test_tf_data_encoder_matches_keras_ops_version():
    import tensorflow as tf

    anchors = multiscale_anchors(128)
    rng = np.random.default_rng(0)
    corner = rng.uniform(-0.1, 0.8, (2, 100, 2)).astype(np.float32)
    boxes = np.concatenate([corner, corner + rng.uniform(0.02, 0.5, (2, 100, 2))], -1)
    labels = rng.integers(0, 5, (2, 100)).astype(np.int32)
    labels[:, 7:] = -1  # 7 boxes per image, the rest padding
    boxes[:, 7:] = 0.0
    encoder = TargetEncoder(anchors, num_classes=5)
    ds = tf.data.Dataset.from_tensor_slices((boxes, labels)).map(encoder).batch(2)
    batch = next(iter(ds))
    assert batch["boxes"].shape == (2, 2046, 5) and batch["classes"].shape == (2, 2046, 6)
    batched = encoder(boxes, labels)  # (B, M, 4) input
    for i in range(2):
        ref = encode_targets(anchors, boxes[i], labels[i], num_classes=5)
        for key in ("boxes", "classes"):
            np.testing.assert_allclose(batch[key][i].numpy(), np.asarray(ref[key]), atol=1e-5)
            np.testing.assert_allclose(batched[key][i].numpy(), np.asarray(ref[key]), atol=1e-5)
    positives = batch["boxes"][..., 4].numpy().sum(axis=1)
    assert np.all(positives >= 7)  # every valid box owns at least its forced anchor
    with pytest.raises(ValueError, match="boxes/labels must have shapes"):
        encoder(boxes[0], labels)
