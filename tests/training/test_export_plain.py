"""`Trainer.export`: `model.keras` is the user model (built-in layers, its `ModelInfo`)."""

from __future__ import annotations

import json
import zipfile

import keras
import numpy as np
import pytest

from cvbench.training import TrainConfig, Trainer
from cvbench.utils.model_file import ModelInfo, load_model

pytestmark = pytest.mark.backend_agnostic


class NoisyDense(keras.layers.Dense):
    """A training-only subclass: its file must hold a plain Dense."""


class Doubling(keras.layers.Layer):
    def call(self, x):
        return x * 2.0


def _trainer(layer, tmp_path, **kwargs):
    inputs = keras.Input((3,))
    model = keras.Model(inputs, layer(inputs))
    loss = keras.losses.MeanSquaredError()
    config = TrainConfig(log_every=0, progress_bar=False, seed=0, log_dir=str(tmp_path))
    return Trainer(model, loss, schedule=0.1, precision="float32", distribution="single",
                   config=config, **kwargs)  # fmt: skip


def _classes(path):
    config = json.loads(zipfile.ZipFile(path).read("config.json"))
    return [entry["class_name"] for entry in config["config"]["layers"]]


def test_export_writes_the_plain_model_with_its_info(tmp_path):
    info = ModelInfo(task="classification", class_names=("a", "b"), image_size=(1, 1))
    trainer = _trainer(NoisyDense(2, name="dense"), tmp_path, model_info=info)
    written = trainer.export(tmp_path / "export")
    assert _classes(written["keras"]) == ["InputLayer", "Dense"]
    model, read = load_model(written["keras"])
    assert read == info
    x = np.ones((1, 3), "float32")
    np.testing.assert_allclose(model(x), trainer.model(x), atol=1e-6)


def test_export_applies_the_transform(tmp_path):
    def transform(model):
        inputs = keras.Input((3,))
        return keras.Model(inputs, keras.layers.Activation("softmax")(model(inputs)))

    trainer = _trainer(keras.layers.Dense(2), tmp_path, export_transform=transform)
    written = trainer.export(tmp_path / "export")
    model, info = load_model(written["keras"])
    assert info is None
    np.testing.assert_allclose(np.sum(model(np.ones((1, 3), "float32"))), 1.0, atol=1e-6)


def test_a_model_to_plain_keras_cannot_convert_is_exported_as_it_is(tmp_path):
    trainer = _trainer(Doubling(name="doubling"), tmp_path)
    with pytest.warns(UserWarning, match="exporting the model as it is: layer 'doubling'"):
        written = trainer.export(tmp_path / "export")
    assert _classes(written["keras"]) == ["InputLayer", "Doubling"]
