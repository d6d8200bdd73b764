"""Exporting a trained model: a `.keras` file, and a SavedModel for serving on TensorFlow."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import keras

from cvbench.utils.io import atomic_path


def export_model(model: keras.Model, directory: str | Path) -> dict[str, Path]:
    """Writes `directory/model.keras` and, on TensorFlow, `directory/saved_model/`.

    Each is written under a temporary name and renamed into place, replacing an older export.

    Args:
        model: the model to export.
        directory: output directory (created).

    Returns:
        The written paths by kind: "keras" and, on TensorFlow, "saved_model".
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    keras_path = directory / "model.keras"
    with atomic_path(keras_path) as tmp:
        model.save(tmp)
    written["keras"] = keras_path
    if keras.config.backend() == "tensorflow":
        final = directory / "saved_model"
        staging = Path(tempfile.mkdtemp(prefix=".saved_model.", dir=directory))
        try:
            model.export(str(staging / "model"), format="tf_saved_model", verbose=False)
            if final.exists():
                shutil.rmtree(final)
            (staging / "model").rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        written["saved_model"] = final
    return written
