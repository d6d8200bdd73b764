"""The model's kind picks what inference and export do, from one table per module keyed by
`ModelInfo.head.task` (a detection part present: a detector), not scattered `if`s."""

from __future__ import annotations

import numpy as np
import pytest
from inference_models import (
    channel_classifier,
    classifier_info,
    constant_detector,
    detector_info,
)

from cvbench.inference import export, resolve
from cvbench.inference.classification import classify
from cvbench.inference.detection import detect
from cvbench.utils.model_file import TASKS


def test_every_kind_has_its_entries():
    assert sorted(export._KINDS) == sorted(resolve._KINDS) == sorted(TASKS)


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("task", ["segmentation", "Detection", None])
def test_default_info_names_an_unknown_task(task):
    with pytest.raises(ValueError, match=f"task must be one of .*; got {task!r}"):
        resolve.default_info(channel_classifier(), task=task)


@pytest.mark.backend_agnostic
def test_default_info_of_each_kind():
    info = resolve.default_info(channel_classifier(), task="classification")
    assert (info.task, info.image_size, info.resize, info.detection) == (
        "classification",
        (8, 8),
        "center_crop",
        None,
    )
    assert info.class_names == ("0", "1", "2")
    info = resolve.default_info(constant_detector(), task="detection", class_names=["a", "b"])
    assert (info.task, info.image_size, info.resize) == ("detection", (64, 64), "stretch")
    assert info.head is info.detection and info.class_names == ("a", "b")


@pytest.mark.backend_agnostic
def test_a_model_of_the_other_kind_is_named():
    image = np.zeros((8, 8, 3))
    with pytest.raises(ValueError, match="a classification model .*detection needs a detector"):
        detect(channel_classifier(), image, info=classifier_info())
    with pytest.raises(ValueError, match="a detection model .*classification needs a classifier"):
        classify(constant_detector(), image, info=detector_info())


def test_served_info_carries_the_threshold_of_detectors_only():
    classifier = classifier_info()
    assert export._as_served(classifier, 0.3) is classifier
    assert export._as_served(classifier, None) is classifier
    detector = detector_info()
    assert export._as_served(detector, None) is detector
    served = export._as_served(detector, 0.3)
    assert served.detection.postprocess.score_threshold == 0.3
    # Everything else as the model file's: NMS at IoU 0.5, 10 boxes (detector_info).
    assert served.detection.postprocess.iou_threshold == 0.5
    assert served.detection.postprocess.max_total == 10
    assert served.detection.anchors == detector.detection.anchors


# Not backend_agnostic: the serving export needs TensorFlow (these run in the TensorFlow
# part of `make test` only).
def test_each_kind_checks_both_options():
    # A bad value is refused whatever the model's kind (the one rule of `top_k` and
    # `score_threshold`, `model_file.check_score_threshold`): a classifier once ignored a
    # threshold of 2.0, a detector a top_k of 0. A valid one of the other kind is unused.
    export.serving_function(channel_classifier(), classifier_info(), score_threshold=0.3)
    export.serving_function(constant_detector(), detector_info(), top_k=3)
    for model, info in [(channel_classifier(), classifier_info()),
                        (constant_detector(), detector_info())]:  # fmt: skip
        with pytest.raises(ValueError, match="top_k must be an int >= 1; got 0"):
            export.serving_function(model, info, top_k=0)
        with pytest.raises(ValueError, match=r"score_threshold must be in \[0, 1\); got 1.0"):
            export.serving_function(model, info, score_threshold=1.0)


def test_serving_outputs_of_each_kind():
    images = np.zeros((1, 8, 8, 3), np.uint8)
    fn = export.serving_function(channel_classifier(), classifier_info(), top_k=2)
    outputs = fn(images)
    # Zero images: logits 0, 0, 0 -> probabilities 1/3 each; top 2 are classes 0 and 1.
    np.testing.assert_allclose(outputs["probabilities"].numpy(), [[1 / 3] * 3], rtol=1e-6)
    assert outputs["top_k_indices"].numpy().tolist() == [[0, 1]]
    fn = export.serving_function(constant_detector(), detector_info(), score_threshold=0.5)
    found = fn(np.zeros((1, 64, 64, 3), np.uint8))
    # sigmoid(2) = 0.88 and sigmoid(1) = 0.73 pass 0.5; sigmoid(-1) = 0.27 does not.
    assert int(found["num_detections"].numpy()[0]) == 2
    names = [n.decode() for n in found["detection_class_names"].numpy()[0, :2]]
    assert names == ["square", "circle"]
