"""The one path from SSD outputs to detections (`cvbench.detection.predict`): the settings a
model file records decide the anchors, the coder and NMS for every caller, and the task,
`default_info` and the files agree on them."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.detection.anchors import multiscale_anchors
from cvbench.detection.postprocess import postprocess
from cvbench.detection.predict import (
    Decoder,
    detection_settings,
    predict_coco,
    predict_detections,
)
from cvbench.tasks import DetectionTask, TaskOptions
from cvbench.tasks.recipes import get_recipe

pytestmark = pytest.mark.backend_agnostic


class FixedOutputs(keras.layers.Layer):
    """A stand-in detector head: fixed codes and logits for every image of the batch."""

    def __init__(self, codes, logits):
        super().__init__()
        self.codes = np.asarray(codes, np.float32)
        self.logits = np.asarray(logits, np.float32)

    def call(self, images):
        batch = keras.ops.shape(images)[0]
        zero = 0.0 * keras.ops.mean(images)
        codes = keras.ops.broadcast_to(self.codes[None], (batch, *self.codes.shape)) + zero
        logits = keras.ops.broadcast_to(self.logits[None], (batch, *self.logits.shape))
        return {"boxes": codes, "classes": logits + zero}


def fixed_model(size, codes, logits):
    inputs = keras.Input((*size, 3))
    return keras.Model(inputs, FixedOutputs(codes, logits)(inputs))


def test_predict_detections_maps_to_original_pixels():
    # multiscale_anchors(64): grids 8, 4, 2, 1, 1: 86 locations x 6 = 516 anchors
    logits = np.full((516, 2), -30.0, np.float32)
    logits[0, 1] = 2.0  # the first anchor: [-12, -12, 20, 20] / 64 -> clipped [0, 0, 20/64, ..]
    model = fixed_model((64, 64), np.zeros((516, 4)), logits)
    images = np.zeros((2, 64, 64, 3), np.float32)
    dets = predict_detections(model, images, [(480, 640), (100, 50)])
    assert [len(d["scores"]) for d in dets] == [1, 1]
    assert dets[0]["classes"].tolist() == [1]
    # Normalized [0, 0, 0.3125, 0.3125] times (height, width) of each original image.
    np.testing.assert_allclose(dets[0]["boxes"], [[0, 0, 150, 200]], rtol=1e-6)
    np.testing.assert_allclose(dets[1]["boxes"], [[0, 0, 31.25, 15.625]], rtol=1e-6)
    with pytest.raises(ValueError, match=r"original_sizes must have shape \(2, 2\)"):
        predict_detections(model, images, [(480, 640)])


def test_predict_detections_default_anchors_of_a_non_square_input():
    # Input 64 x 128: multiscale_anchors((64, 128)), grids 8x16, 4x8, 2x4, 1x2, 1x1: 171
    # locations x 6 = 1026 anchors. The first, [-12, -12, 20, 20] in input pixels, is
    # [-0.1875, -0.09375, 0.3125, 0.15625] normalized, clipped to [0, 0, 0.3125, 0.15625]; in
    # a 100 x 200 original: [0, 0, 31.25, 31.25].
    logits = np.full((1026, 1), -30.0, np.float32)
    logits[0, 0] = 2.0
    model = fixed_model((64, 128), np.zeros((1026, 4)), logits)
    dets = predict_detections(model, np.zeros((1, 64, 128, 3), np.float32), [(100, 200)])
    np.testing.assert_allclose(dets[0]["boxes"], [[0, 0, 31.25, 31.25]], rtol=1e-6)


def test_the_settings_decide_the_anchors_and_nms():
    # one level (3) of one anchor per cell at 32 px: a 4 x 4 grid, 16 anchors; every anchor
    # scores the same, so max_total alone decides how many come back
    settings = detection_settings(
        max_total=3,
        anchors={"min_level": 3, "max_level": 3, "anchor_scale": 1.0,
                 "aspect_ratios": [1.0], "scales_per_octave": 1},
    )  # fmt: skip
    decoder = Decoder(settings, (32, 32))
    np.testing.assert_array_equal(decoder.anchors, multiscale_anchors(32, **settings["anchors"]))
    assert decoder.anchors.shape == (16, 4)
    outputs = {"boxes": np.zeros((2, 16, 4), np.float32), "classes": np.ones((2, 16, 2))}
    dets = decoder(outputs)
    assert dets["num_detections"].tolist() == [3, 3]
    expected = postprocess(outputs["boxes"], outputs["classes"], decoder.anchors, max_total=3)
    for key in expected:
        np.testing.assert_array_equal(dets[key], expected[key])
    model = fixed_model((32, 32), np.zeros((16, 4)), np.ones((16, 2)))
    # the same settings through predict_coco: 3 per image, not SSD320's 100
    meta = {"image_id": np.array([5, 6]), "image_size": np.array([[32, 32]] * 2),
            "valid": np.array([True, False])}  # fmt: skip
    found, ids = predict_coco(model, [(np.zeros((2, 32, 32, 3)), meta)], [1, 2], settings=settings)
    assert ids == [5] and len(found) == 3 and {d["image_id"] for d in found} == {5}


def test_a_caller_threshold_only_adds_to_the_files():
    # sigmoid(0) = 0.5 for every anchor: above 0.4, not above 0.6; the file's own threshold
    # (0.7 here) still applies when the caller asks for less
    outputs = {"boxes": np.zeros((1, 516, 4)), "classes": np.zeros((1, 516, 1))}
    decoder = Decoder(detection_settings(), (64, 64))
    assert decoder(outputs, score_threshold=0.4)["num_detections"].tolist() == [100]
    assert decoder(outputs, score_threshold=0.6)["num_detections"].tolist() == [0]
    strict = Decoder(detection_settings(score_threshold=0.7), (64, 64))
    assert strict(outputs, score_threshold=0.1)["num_detections"].tolist() == [0]


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match=r"lack \['scales'\]"):
        Decoder({"anchors": {}, "postprocess": {}}, (32, 32))
    settings = detection_settings()
    settings["postprocess"]["nms_sigma"] = 0.5
    with pytest.raises(ValueError, match=r"unknown post-processing settings \['nms_sigma'\]"):
        Decoder(settings, (32, 32))


def test_one_owner_task_files_and_defaults_agree():
    from cvbench.inference.resolve import default_info

    task = DetectionTask(TaskOptions(model="ssd320", image_size=128))
    assert task.detection_settings == detection_settings() == task.model_info().detection
    model = fixed_model((128, 128), np.zeros((2046, 4)), np.zeros((2046, 90)))
    assert default_info(model, task="detection").detection == detection_settings()
    np.testing.assert_array_equal(task.anchors, Decoder(detection_settings(), (128, 128)).anchors)


def test_a_recipe_override_reaches_the_model_file_and_the_targets():
    # before: the recipe's NMS knobs were printed but the task decoded with the code's defaults
    recipe = get_recipe("ssd320_v1.2").with_overrides(
        {"detection.iou_threshold": 0.5, "detection.max_total": 20,
         "detection.box_coder_scales": (5.0, 5.0, 2.0, 2.0)},
        reason="test",
    )  # fmt: skip
    task = DetectionTask(TaskOptions(model="ssd320", image_size=128, recipe=recipe))
    detection = task.model_info().detection
    assert detection["postprocess"]["iou_threshold"] == 0.5
    assert detection["postprocess"]["max_total"] == 20
    assert detection["scales"] == [5.0, 5.0, 2.0, 2.0]
    assert task._encoder().scales == (5.0, 5.0, 2.0, 2.0)  # training encodes with them too
