"""The info file beside every exported model (#39 item 9): class names and the resize rule
readable without unzipping, as JSON, by `read_model_info` and by plain `json`; and the two
contracts under two names (#39 item 4: `saved_model` is always a serving export)."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from cvbench.inference import ModelInfo, read_model_info, save_model
from cvbench.inference.export import export_for_serving
from cvbench.inference.export_info import read_export_info
from cvbench.training.export import export_trained_model
from cvbench.utils.files import written_by_cvbench
from cvbench.utils.model_file import CONTRACTS, info_file_path

INFO = ModelInfo(task="classification", class_names=("cat", "dog", "fox"), image_size=(16, 16),
                 resize="center_crop", crop_fraction=0.875)  # fmt: skip


def tiny(size: int = 16) -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((size, size, 3))
    x = keras.layers.Conv2D(4, 3)(keras.layers.Rescaling(1 / 255)(inputs))
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x)))


def test_the_trainer_export_writes_model_info_json_beside_model_keras(tmp_path):
    written = export_trained_model(tiny(), tmp_path / "export", info=INFO)
    path = tmp_path / "export" / "model_info.json"
    assert written["info"] == path and written_by_cvbench(path)  # recorded
    data = json.loads(path.read_text())  # plain json: no cvbench, no unzipping
    assert data["class_names"] == ["cat", "dog", "fox"] and data["resize"] == "center_crop"
    assert data["image_size"] == [16, 16] and data["crop_fraction"] == 0.875
    assert data["model_file"] == "model.keras" and data["contract"] == CONTRACTS["model"]
    assert read_model_info(path) == read_model_info(written["keras"]) == INFO
    # model.keras's contract: Keras' own SavedModel, under its own name
    assert sorted(p.name for p in (tmp_path / "export").iterdir() if p.name[0] != ".") == [
        "keras_saved_model", "model.keras", "model_info.json"]  # fmt: skip


def test_no_info_no_info_file(tmp_path):
    with pytest.warns(UserWarning, match="no ModelInfo"):
        written = export_trained_model(tiny(), tmp_path / "export", info=None)
    assert "info" not in written and not (tmp_path / "export" / "model_info.json").exists()


@pytest.mark.parametrize("fmt, name, info_name", [
    ("saved_model", "served", "served_info.json"),
    ("tflite", "m.tflite", "m_tflite_info.json"),
])  # fmt: skip
def test_serving_exports_write_their_info_beside_them(tmp_path, fmt, name, info_name):
    save_model(tiny(), tmp_path / "m.keras", INFO)
    out = export_for_serving(tmp_path / "m.keras", tmp_path / name, format=fmt, top_k=2)
    path = tmp_path / info_name
    assert info_file_path(out) == path and written_by_cvbench(path)
    data = json.loads(path.read_text())
    assert data["contract"] == CONTRACTS["serving"] and data["model_file"] == name
    assert read_model_info(path) == read_export_info(out) == INFO
    # --overwrite replaces both; without it the info file alone stops the export first
    export_for_serving(tmp_path / "m.keras", out, format=fmt, overwrite=True)
    path.write_text("{}")  # the user's file now: never replaced
    with pytest.raises(ValueError, match="not written by cvbench"):
        export_for_serving(tmp_path / "m.keras", out, format=fmt, overwrite=True)


def test_an_existing_info_file_stops_the_export_before_it_starts(tmp_path):
    save_model(tiny(), tmp_path / "m.keras", INFO)
    (tmp_path / "served_info.json").write_text("mine")
    with pytest.raises(ValueError, match="served_info.json exists; pass overwrite=True to replace"):
        export_for_serving(tmp_path / "m.keras", tmp_path / "served")
    assert not (tmp_path / "served").exists()
    assert (tmp_path / "served_info.json").read_text() == "mine"


def test_the_info_file_gives_the_models_own_pixels(tmp_path):
    # The right way for plain Keras (docs/using_models.md): the info's rule, center_crop at
    # 0.875 -> the shorter side to round(16 / 0.875) = 18, then the central 16 x 16; the
    # exported serving graph (uint8 of any size) agrees with the model on those pixels.
    save_model(tiny(), tmp_path / "m.keras", INFO)
    export_for_serving(tmp_path / "m.keras", tmp_path / "served", top_k=3)
    info = json.loads((tmp_path / "served_info.json").read_text())
    image = np.random.default_rng(0).integers(0, 256, (24, 30, 3), dtype=np.uint8)
    side = round(info["image_size"][0] / info["crop_fraction"])
    assert side == 18
    h, w = 18, round(30 * 18 / 24)  # 18 x 22 (22.5 rounds to even)
    resized = tf.image.resize(image[None].astype("float32"), [h, w]).numpy()[0]
    top, left = (h - 16) // 2, (w - 16) // 2
    pixels = resized[top : top + 16, left : left + 16]
    model = keras.saving.load_model(tmp_path / "m.keras")
    probs = tf.nn.softmax(model(pixels[None])).numpy()
    serve = tf.saved_model.load(str(tmp_path / "served")).signatures["serving_default"]
    np.testing.assert_allclose(serve(images=tf.constant(image[None]))["probabilities"], probs,
                               atol=1e-5)  # fmt: skip
