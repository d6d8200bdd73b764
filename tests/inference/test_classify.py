"""`classify`: exact top-k from a classifier with known weights, every model and input kind."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from inference_models import CLASS_NAMES, channel_classifier, classifier_info, detector_info
from PIL import Image

from cvbench.inference import save_model
from cvbench.inference.classification import classify, softmax
from cvbench.inference.detection import detect
from cvbench.inference.resolve import default_info
from cvbench.utils.errors import BadFileError

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


def test_a_model_object_without_info_is_refused_and_default_info_states_the_defaults():
    # A trained model may expect normalized input (the Trainer's model does): no guessing.
    model = channel_classifier()
    with pytest.raises(ValueError, match=r"model object without ModelInfo.*default_info\(model, "
                       r"task='classification'\)"):  # fmt: skip
        classify(model, _image(), top_k=1)
    with pytest.raises(ValueError, match="without ModelInfo"):
        detect(model, _image())
    (result,) = classify(model, _image(), info=default_info(model, task="classification"), top_k=1)
    assert result.class_names == ("1",)  # numbered classes, [0, 255] input, center crop


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
    with pytest.raises(BadFileError, match=r"plain\.keras holds no ModelInfo"):
        classify(no_info, _image())
    with pytest.raises(FileNotFoundError, match=r"missing\.keras"):
        classify(tmp_path / "missing.keras", _image())
    two_names = dataclasses.replace(classifier_info(), class_names=CLASS_NAMES[:2])
    with pytest.raises(ValueError, match=r"^info has 2 class names but the model outputs 3 "):
        classify(model, _image(), info=two_names)


def test_a_tf_data_dataset_input():
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(np.stack([_image(), _image((30, 10, 20))]))
    results = classify(channel_classifier(), dataset.batch(1), info=classifier_info(), top_k=1)
    assert [(r.source, r.class_names) for r in results] == [(0, ("green",)), (1, ("red",))]


def test_default_info_checks_the_class_names():
    from cvbench.inference.resolve import default_info

    info = default_info(channel_classifier(), task="classification", class_names=CLASS_NAMES)
    assert info.class_names == CLASS_NAMES and info.image_size == (8, 8)
    with pytest.raises(ValueError, match="the model has 3 classes; got 2 class names"):
        default_info(channel_classifier(), task="classification", class_names=("a", "b"))


def test_no_tensorflow_import_under_jax(tmp_path):
    # classify and detect on files (PNG, JPEG) and arrays, from a model file, never load
    # TensorFlow. (The file is written here: Keras' own `model.save` imports TensorFlow when
    # it is installed.)
    save_model(channel_classifier(), tmp_path / "c.keras", classifier_info())
    code = """
import sys, numpy as np
from PIL import Image
from inference_models import *
from cvbench.inference.classification import classify
from cvbench.inference.detection import detect
from cvbench.inference.draw import draw_results
Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save("a.png")
Image.fromarray(np.full((20, 30, 3), 40, np.uint8)).save("b.jpg")  # decoded by simplejpeg
assert [r.class_ids for r in classify("c.keras", ["a.png", "b.jpg"], top_k=1)] == [(0,)] * 2
dets = detect(constant_detector(), np.zeros((2, 64, 64, 3)), info=detector_info())
draw_results(dets, np.zeros((2, 64, 64, 3)), "drawn")
assert len(dets[0].scores) == 2, dets
assert "tensorflow" not in sys.modules, "TensorFlow was imported"
print("ok")
"""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
