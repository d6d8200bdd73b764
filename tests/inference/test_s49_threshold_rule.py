"""One score-threshold rule (`cvbench.utils.model_file.check_score_threshold`) for `detect`,
`export_for_serving` and `cvbench predict` / `export`; the export's `top_k` and threshold are
checked whatever the model's kind, before anything is loaded or written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info, constant_detector, detector_info

from cvbench.inference import detect, save_model
from cvbench.inference.export import export_for_serving, serving_function
from cvbench.utils.model_file import check_score_threshold


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 0.999, np.float32(0.25), np.float64(1e-8)])
def test_a_threshold_in_0_1_is_taken_as_a_float(value):
    checked = check_score_threshold(value)
    assert type(checked) is float and checked == float(value)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (1, "1"),  # keeping scores above 1 keeps nothing: the end of [0, 1) is open
        (2.0, "2.0"),
        (-1e-9, "-1e-09"),
        (float("nan"), "nan"),  # NaN compares false with every score
        (float("inf"), "inf"),
        (True, "True"),  # a bool is no threshold, though it is an int
        ("0.5", "'0.5'"),  # nor a string (float() would have taken it)
        (None, "None"),
    ],
)
def test_anything_else_is_refused_naming_it(value, shown):
    with pytest.raises(ValueError, match=rf"^score_threshold must be in \[0, 1\); got {shown}$"):
        check_score_threshold(value)


def test_detect_uses_the_rule():
    # the model is never run: the threshold is checked first
    with pytest.raises(ValueError, match=r"score_threshold must be in \[0, 1\); got '0.5'"):
        detect(constant_detector(), np.zeros((64, 64, 3)), info=detector_info(),
               score_threshold="0.5")  # fmt: skip


@pytest.mark.parametrize(
    ("model", "info", "kwargs", "message"),
    [
        # a classifier ignores the threshold, a detector top_k: a bad one is refused anyway
        (channel_classifier, classifier_info, {"score_threshold": 2}, r"score_threshold .*got 2$"),
        (channel_classifier, classifier_info, {"score_threshold": float("nan")}, r"got nan$"),
        (constant_detector, detector_info, {"top_k": 0}, r"top_k must be an int >= 1; got 0$"),
        (constant_detector, detector_info, {"top_k": 2.5}, r"top_k .*; got 2.5$"),
        (constant_detector, detector_info, {"score_threshold": 1.0}, r"score_threshold .*1.0$"),
    ],
)
def test_export_refuses_a_bad_value_whatever_the_kind(tmp_path, model, info, kwargs, message):
    with pytest.raises(ValueError, match=message):
        export_for_serving(model(), tmp_path / "served", info=info(), **kwargs)
    assert list(tmp_path.iterdir()) == []  # nothing written, no staging left


def test_serving_function_uses_the_same_checks():
    with pytest.raises(ValueError, match=r"top_k must be an int >= 1; got True"):
        serving_function(channel_classifier(), classifier_info(), top_k=True)
    with pytest.raises(ValueError, match=r"score_threshold must be in \[0, 1\); got -0.5"):
        serving_function(constant_detector(), detector_info(), score_threshold=-0.5)


def test_a_numpy_threshold_reaches_the_served_info_as_a_float(tmp_path):
    path = save_model(constant_detector(), tmp_path / "det.keras", detector_info())
    export_for_serving(path, tmp_path / "served", score_threshold=np.float32(0.25))
    written = json.loads((tmp_path / "served_info.json").read_text())
    # 0.25 is exact in float32, so the JSON holds 0.25 (detector_info's own is 1e-8)
    assert written["detection"]["postprocess"]["score_threshold"] == 0.25
