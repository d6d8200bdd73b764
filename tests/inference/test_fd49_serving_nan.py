"""A serving export (SavedModel, TFLite) of an SSD whose outputs are broken gives
`postprocess`'s detections: an anchor whose decoded box has a NaN, or a class whose score is
NaN, is never a detection (probe fa49 #1's rule, which only the numpy path had: the in-graph
NMS passed a NaN box on as the image's best detection)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from cvbench.detection.anchors import multiscale_anchors
from cvbench.detection.postprocess import postprocess
from cvbench.inference.export import export_for_serving
from cvbench.inference.serving import detections
from tests.inference.test_export_ssd import assert_same_detections
from tests.inference_models import DETECTOR_ANCHORS, constant_detector, detector_info

NAN = float("nan")
POST = detector_info().detection["postprocess"]  # IoU 0.5, threshold 1e-8, 10 and 10
SCALES = tuple(detector_info().detection["scales"])


def _logit(p):
    return float(np.log(p) - np.log1p(-p))


@pytest.mark.backend_agnostic  # TensorFlow's graph ops, whatever Keras runs on
@pytest.mark.parametrize("batch", [1, 2])
def test_in_graph_detections_drop_nan_boxes_and_scores_as_numpy(batch):
    # Three anchors, two classes: anchor 0 NaN box codes and the top scores (0.993, 0.9);
    # anchor 1 zero codes (its box is the anchor) scoring 0.6 and a NaN logit for class 1;
    # anchor 2 zero codes scoring 0.3 and 0.2, disjoint from anchor 1. Left: anchor 1
    # class 0 (0.6), anchor 2 class 0 (0.3) and class 1 (0.2): 3 detections, no NaN.
    anchors = np.array([[0, 0, 0.5, 0.5], [0.125, 0.1, 0.5, 0.5], [0.6, 0.6, 1, 1]], np.float32)
    codes = np.zeros((batch, 3, 4), np.float32)
    codes[:, 0] = NAN
    logits = np.array([[[_logit(0.993), _logit(0.9)], [_logit(0.6), NAN],
                        [_logit(0.3), _logit(0.2)]]] * batch, np.float32)  # fmt: skip
    got = {k: v.numpy() for k, v in detections(codes, logits, anchors, **POST).items()}
    expected = postprocess(codes, logits, anchors, **POST)
    assert expected["num_detections"].tolist() == [3] * batch
    assert_same_detections(got, expected)
    np.testing.assert_allclose(got["detection_scores"][:, :3], [[0.6, 0.3, 0.2]] * batch, 1e-6)
    assert np.isfinite(got["detection_boxes"]).all() and np.isfinite(got["detection_scores"]).all()


def _nan_anchor_detector():
    """`constant_detector` with anchor 0's box codes NaN (its class 1 scored 0.880797, the
    best): left are anchors 1, 2, 3 x 2 classes, disjoint quarters, 6 detections."""
    model = constant_detector()
    codes = model.get_layer("codes")
    bias = np.zeros(16, np.float32)
    bias[:4] = NAN
    codes.set_weights([codes.get_weights()[0], bias])
    return model


def _expected(model, images):
    outputs = model(images.astype("float32"), training=False)
    anchors = multiscale_anchors(64, **DETECTOR_ANCHORS)
    return postprocess(outputs["boxes"], outputs["classes"], anchors, scales=SCALES, **POST)


def test_a_saved_model_export_gives_postprocess_detections_of_a_nan_anchor(tmp_path):
    model = _nan_anchor_detector()
    path = export_for_serving(model, tmp_path / "ssd", info=detector_info(), score_threshold=None)
    images = np.zeros((2, 64, 64, 3), np.uint8)
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    got = {k: v.numpy() for k, v in serve(images=tf.constant(images)).items()}
    expected = _expected(model, images)
    assert expected["num_detections"].tolist() == [6, 6] and expected["nan_anchors"].tolist() == [
        1,
        1,
    ]
    assert_same_detections({k: v for k, v in got.items() if k != "detection_class_names"}, expected)
    # the best left is anchor 3's class 0, sigmoid(1) = 0.731059 (anchor 0's 0.880797 gone)
    np.testing.assert_allclose(got["detection_scores"][:, 0], 0.731059, atol=1e-6)
    assert np.isfinite(got["detection_boxes"]).all()


def test_a_tflite_export_gives_postprocess_detections_of_a_nan_anchor(tmp_path):
    model = _nan_anchor_detector()
    path = export_for_serving(
        model, tmp_path / "ssd.tflite", info=detector_info(), format="tflite", score_threshold=None
    )
    images = np.zeros((1, 64, 64, 3), np.uint8)
    got = tf.lite.Interpreter(model_path=str(path)).get_signature_runner()(images=images)
    expected = _expected(model, images)
    assert expected["num_detections"].tolist() == [6]
    assert_same_detections({k: v for k, v in got.items() if k != "detection_class_names"}, expected)
    assert np.isfinite(got["detection_boxes"]).all()
