"""`Trainer.export` / `export_trained_model` replaces only an earlier cvbench export (probe
p50 #2: it renamed a user's `keras_saved_model/` away and deleted it, and replaced a user's
`model.keras` and `model_info.json`, exit 0, no warning)."""

from __future__ import annotations

import keras
import pytest

from cvbench.inference import ModelInfo
from cvbench.training.export import export_trained_model
from cvbench.utils.files import written_by_cvbench

INFO = ModelInfo(task="classification", class_names=("cat", "dog"), image_size=(8, 8),
                 resize="center_crop", crop_fraction=0.875)  # fmt: skip
TF = keras.config.backend() == "tensorflow"


def tiny() -> keras.Model:
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(2, 3)(inputs))
    return keras.Model(inputs, keras.layers.Dense(2)(x))


def user_files(out, name):
    """A user's file or folder at `out/name`; returns {path: bytes} of what must survive."""
    if name == "keras_saved_model":
        (out / name).mkdir(parents=True)
        (out / name / "notes.txt").write_text("my precious notes")
        return {out / name / "notes.txt": b"my precious notes"}
    out.mkdir(parents=True)
    (out / name).write_bytes(b"user's own " + name.encode())
    return {out / name: b"user's own " + name.encode()}


names = ["model.keras", "model_info.json"] + (["keras_saved_model"] if TF else [])


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("name", names)
def test_a_users_file_or_folder_in_the_export_is_refused_and_kept(tmp_path, name):
    out = tmp_path / "userdir"
    kept = user_files(out, name)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ValueError, match=f"{name} exists and was not written by cvbench"):
        export_trained_model(tiny(), out, info=INFO)
    assert {p: p.read_bytes() for p in kept} == kept  # nothing lost
    assert sorted(p.name for p in out.iterdir()) == before  # nothing written either


@pytest.mark.backend_agnostic
def test_an_earlier_cvbench_export_is_replaced(tmp_path):
    out = tmp_path / "export"
    export_trained_model(tiny(), out, info=INFO)
    first = (out / "model.keras").read_bytes()
    written = export_trained_model(tiny(), out, info=INFO)  # twice: still ours, replaced
    assert all(written_by_cvbench(p) for p in written.values() if p.is_file())
    assert (out / "model.keras").stat().st_size > 0 and first


def test_a_file_added_to_an_earlier_export_makes_it_the_users(tmp_path):
    # TensorFlow only (not backend_agnostic): keras_saved_model/ is written on TensorFlow
    out = tmp_path / "export"
    export_trained_model(tiny(), out, info=INFO)
    (out / "keras_saved_model" / "README").write_text("added by the user")
    with pytest.raises(ValueError, match="keras_saved_model exists and was not written"):
        export_trained_model(tiny(), out, info=INFO)
    assert (out / "keras_saved_model" / "README").read_text() == "added by the user"
