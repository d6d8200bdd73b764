"""Exporting a model for users: a `.keras` file with its `ModelInfo`, and a SavedModel for
serving on TensorFlow. Pass a model of built-in layers (`Trainer.user_model()`,
`cvbench.utils.plain_keras.to_plain_keras`) for a file plain Keras loads."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import keras

from cvbench.utils.model_file import ModelInfo, save_model


def export_model(
    model: keras.Model, directory: str | Path, *, info: ModelInfo | None = None
) -> dict[str, Path]:
    """Writes `directory/model.keras` (with `info`) and, on TensorFlow, `directory/saved_model/`.

    Each is written under a temporary name and renamed into place, replacing an older export.

    Args:
        model: the model to export (as users get it).
        directory: output directory (created).
        info: what inference needs, stored in `model.keras` (`cvbench.utils.model_file`).

    Returns:
        The written paths by kind: "keras" and, on TensorFlow, "saved_model".
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    keras_path = directory / "model.keras"
    save_model(model, keras_path, info)
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
