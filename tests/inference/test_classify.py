"""`classify`: exact top-k from a classifier with known weights, every model and input kind."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from inference_models import CLASS_NAMES, channel_classifier, classifier_info, detector_info
from PIL import Image

from cvbench.inference import save_model
from cvbench.inference.classification import classify, softmax

pytestmark = pytest.mark.backend_agnostic


def _image(means=(10, 30, 20), height=8, width=8):
    return np.broadcast_to(np.asarray(means, np.float32), (height, width, 3)).copy()


# Channel means (10, 30, 20) -> logits (1, 3, 2) -> softmax e^k / (e + e^3 + e^2).
_Z = math.e + math.e**3 + math.e**2
_EXPECTED = ((1, 2, 0), ("green", "blue", "red"), (math.e**3 / _Z, math.e**2 / _Z, math.e / _Z))


def test_top_k_order_names_and_softmax_probabilities():
    (result,) = classify(channel_classifier(), _image(), info=classifier_info(), top_k=3)
    assert result.source == 0 and result.image_size == (8, 8)
    assert result.class_ids == _EXPECTED[0]
    assert result.class_names == _EXPECTED[1]
    np.testing.assert_allclose(result.scores, _EXPECTED[2], rtol=1e-6)
    top2 = classify(channel_classifier(), _image(), info=classifier_info(), top_k=2)[0]
    assert top2.class_ids == (1, 2)


def test_top_k_is_capped_at_the_number_of_classes_and_ties_go_to_the_lower_index():
    (result,) = classify(channel_classifier(), _image((5, 5, 5)), info=classifier_info(), top_k=10)
    assert result.class_ids == (0, 1, 2)  # equal logits: index order
    np.testing.assert_allclose(result.scores, [1 / 3] * 3, rtol=1e-6)


def test_from_a_model_file_on_files_and_folders(tmp_path):
    path = save_model(channel_classifier(), tmp_path / "m.keras", classifier_info())
    images = tmp_path / "images"
    images.mkdir()
    # A 16 x 16 file at crop fraction 1: resized to 8 x 8 (a constant stays constant).
    Image.fromarray(_image((30, 10, 20), 16, 16).astype(np.uint8)).save(images / "b.png")
    Image.fromarray(_image().astype(np.uint8)).save(images / "a.png")
    results = classify(path, images, top_k=1)
    assert [(r.source, r.class_names, r.image_size) for r in results] == [
        (str(images / "a.png"), ("green",), (8, 8)),
        (str(images / "b.png"), ("red",), (16, 16)),
    ]
    np.testing.assert_allclose(results[0].scores, _EXPECTED[2][:1], rtol=1e-6)


def test_center_crop_decides_what_the_model_sees():
    # 8 x 24: red thirds left and right, green middle. The center crop at 1.0 is the middle
    # third (green wins); stretched, red covers 2/3 of the picture (red wins).
    image = np.zeros((8, 24, 3), np.float32)
    image[:, :8, 0] = image[:, 16:, 0] = 255
    image[:, 8:16, 1] = 255
    crop = classify(channel_classifier(), image, info=classifier_info(), top_k=1)[0]
    stretched = classify(
        channel_classifier(), image, info=classifier_info(resize="stretch"), top_k=1
    )[0]
    assert crop.class_names == ("green",) and stretched.class_names == ("red",)


def test_batch_size_does_not_change_the_results():
    rng = np.random.default_rng(0)
    images = [rng.uniform(0, 255, (rng.integers(6, 20), rng.integers(6, 20), 3)) for _ in range(5)]
    one = classify(channel_classifier(), images, info=classifier_info(), batch_size=1)
    many = classify(channel_classifier(), images, info=classifier_info(), batch_size=32)
    assert [r.class_ids for r in one] == [r.class_ids for r in many]
    np.testing.assert_allclose([r.scores for r in one], [r.scores for r in many], rtol=1e-5)
    assert [r.source for r in one] == [0, 1, 2, 3, 4]


def test_a_model_object_without_info_gets_numbered_classes():
    (result,) = classify(channel_classifier(), _image(), top_k=1)
    assert result.class_names == ("1",)


def test_to_dict_is_json_ready():
    (result,) = classify(channel_classifier(), _image(), info=classifier_info(), top_k=1)
    assert result.to_dict() == {
        "source": 0,
        "image_size": [8, 8],
        "classes": [{"class_id": 1, "class_name": "green", "score": result.scores[0]}],
    }


def test_softmax_is_stable_for_large_logits():
    np.testing.assert_allclose(softmax(np.array([[1000.0, 1000.0, -1000.0]])), [[0.5, 0.5, 0]])


def test_errors(tmp_path):
    model = channel_classifier()
    with pytest.raises(ValueError, match="top_k must be an int >= 1; got 0"):
        classify(model, _image(), info=classifier_info(), top_k=0)
    with pytest.raises(ValueError, match="is a detection model"):
        classify(model, _image(), info=detector_info())
    no_info = tmp_path / "plain.keras"
    model.save(no_info)
    with pytest.raises(ValueError, match=r"plain\.keras carries no ModelInfo"):
        classify(no_info, _image())
    with pytest.raises(FileNotFoundError, match=r"missing\.keras"):
        classify(tmp_path / "missing.keras", _image())
    two_names = dataclasses.replace(classifier_info(), class_names=CLASS_NAMES[:2])
    with pytest.raises(ValueError, match=r"\(batch, 2\) logits for 2 class names; got \(1, 3\)"):
        classify(model, _image(), info=two_names)
