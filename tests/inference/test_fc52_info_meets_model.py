"""Where a model and its `ModelInfo` meet (`classify` / `detect` with `info=`, `save_model`),
an info that contradicts the model (input size, class count) is refused, naming the argument
and the difference (`check_model_matches_info`), and `save_model` writes nothing then."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from inference_models import (
    CLASS_NAMES,
    channel_classifier,
    classifier_info,
    constant_detector,
    detector_info,
)

from cvbench.inference import save_model
from cvbench.inference.classification import classify
from cvbench.inference.detection import detect
from cvbench.utils.errors import BadFileError
from cvbench.utils.model_file import load_model

pytestmark = pytest.mark.backend_agnostic

SIZE_16 = r"^info image_size \[16, 16\] differs from the model's input size \[8, 8\]$"


def _info(info, **changes):
    return dataclasses.replace(info, **changes)


def _image(height=8, width=8):
    return np.full((height, width, 3), 20.0, np.float32)


def test_classify_refuses_an_image_size_that_is_not_the_models_before_and_after_a_call():
    model = channel_classifier()
    wrong = _info(classifier_info(), image_size=(16, 16))
    with pytest.raises(ValueError, match=SIZE_16):  # a fresh model: was Keras' traceback
        classify(model, _image(), info=wrong)
    (ok,) = classify(model, _image(), info=classifier_info(), top_k=1)
    assert ok.class_names == ("red",)
    with pytest.raises(ValueError, match=SIZE_16):  # once called: was silently run at 16 x 16
        classify(model, _image(), info=wrong)


def test_classify_refuses_a_class_count_that_is_not_the_models(tmp_path):
    two = _info(classifier_info(), class_names=CLASS_NAMES[:2])
    with pytest.raises(ValueError, match=r"^info has 2 class names but the model outputs 3"):
        classify(channel_classifier(), _image(), info=two)
    # an info overriding a file's is checked as well
    path = save_model(channel_classifier(), tmp_path / "m.keras", classifier_info())
    with pytest.raises(ValueError, match=SIZE_16):
        classify(path, _image(), info=_info(classifier_info(), image_size=(16, 16)))


def test_detect_refuses_a_class_count_or_size_that_is_not_the_ssds():
    model = constant_detector()  # 64 x 64 in, 2 classes per anchor
    three = _info(detector_info(), class_names=("circle", "square", "star"))
    with pytest.raises(ValueError, match=r"^info has 3 class names but the model outputs 2 "):
        detect(model, _image(64, 64), info=three)
    with pytest.raises(ValueError, match=r"^info image_size \[32, 32\] differs from .* \[64, 64\]"):
        detect(model, _image(64, 64), info=_info(detector_info(), image_size=(32, 32)))
    (det,) = detect(model, _image(64, 64), info=detector_info(), score_threshold=0.8)
    assert det.class_names == ("square",)


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (_info(classifier_info(), image_size=(16, 16)), SIZE_16),
        (
            _info(classifier_info(), class_names=CLASS_NAMES[:2]),
            r"^info has 2 class names but the model outputs 3 classes$",
        ),
        (
            _info(detector_info(), image_size=(8, 8), class_names=CLASS_NAMES),
            r'^info says detection, but the model does not output \{"boxes", "classes"\}$',
        ),
    ],
)
def test_save_model_refuses_an_info_that_contradicts_the_model_and_writes_nothing(
    tmp_path, info, message
):
    with pytest.raises(ValueError, match=message) as caught:
        save_model(channel_classifier(), tmp_path / "out" / "m.keras", info)
    assert not isinstance(caught.value, BadFileError)  # an argument, not a file
    assert list(tmp_path.iterdir()) == []  # not even the folder
    written = save_model(channel_classifier(), tmp_path / "out" / "m.keras", classifier_info())
    assert load_model(written)[1] == classifier_info()
