"""`export_trained_model`'s `keras_saved_model/` (TensorFlow only: a SavedModel needs it): the
model's function (model.keras's contract, not the serving one of `cvbench export`'s
`saved_model`), each weight stored once."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from cvbench.training.export import export_trained_model


def test_the_saved_model_stores_each_weight_once_and_serves_the_model(tmp_path):
    # Keras 3.15's model.export() stores every weight twice (the model tracked beside the
    # function's variables): 89.7 MB for ResNet-18's 44.8 MB
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(64, 3)(inputs)
    model = keras.Model(inputs, keras.layers.Dense(5)(keras.layers.Flatten()(x)))
    written = export_trained_model(model, tmp_path / "export", info=None)
    assert written["keras_saved_model"] == tmp_path / "export" / "keras_saved_model"
    assert not (tmp_path / "export" / "saved_model").exists()  # that name is serving's
    weights = sum(int(np.prod(w.shape)) * 4 for w in model.weights)  # 1792 + 11525 floats
    stored = sum(f.stat().st_size for f in (written["keras_saved_model"] / "variables").iterdir())
    assert weights <= stored < 1.1 * weights, (stored, weights)
    loaded = tf.saved_model.load(str(written["keras_saved_model"]))
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 3)).astype("float32")
    np.testing.assert_allclose(loaded.serve(x).numpy(), model(x), rtol=1e-6, atol=1e-6)
    out = loaded.signatures["serving_default"](tf.constant(x))
    np.testing.assert_allclose(next(iter(out.values())).numpy(), model(x), rtol=1e-6, atol=1e-6)


def test_every_file_of_a_training_export_is_recorded_as_cvbench_s(tmp_path):
    """The probe's finding: `eval --json run/export/model.keras --overwrite` was refused as
    "not written by cvbench"; only model_info.json was recorded. Now model.keras and every
    file of keras_saved_model/ are (recorded in its staging folder, then renamed whole)."""
    import warnings

    from cvbench.utils.files import written_by_cvbench

    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(inputs)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no ModelInfo: its warning is not what is tested
        written = export_trained_model(model, tmp_path / "export", info=None)
    files = [p for p in written["keras_saved_model"].rglob("*") if p.is_file()]
    files = [p for p in files if p.name != ".cvbench-outputs.json"]
    assert written_by_cvbench(written["keras"])
    assert files and all(written_by_cvbench(p) for p in files), files
