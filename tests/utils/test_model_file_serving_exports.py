"""A serving export (a SavedModel folder, a TFLite file) given where cvbench reads a `.keras`
model file: one line saying what it is and which file cvbench reads (was "is a folder, not
a regular file" and "not a zip archive")."""

from __future__ import annotations

import pytest

from cvbench.utils.errors import BadFileError
from cvbench.utils.model_file import load_model, read_model_info


@pytest.fixture
def saved_model(tmp_path):
    folder = tmp_path / "sm"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01")
    return folder


@pytest.fixture
def tflite(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(24))  # a flatbuffer's file identifier
    return path


@pytest.mark.parametrize("read", [read_model_info, load_model])
def test_a_saved_model_folder_is_named_as_a_serving_export(saved_model, read):
    with pytest.raises(BadFileError, match=r"sm is a SavedModel folder, an export for serving"):
        read(saved_model)


@pytest.mark.parametrize("read", [read_model_info, load_model])
def test_a_tflite_file_is_named_as_a_serving_export(tflite, read):
    with pytest.raises(BadFileError, match=r"m.tflite is a TFLite file, an export for serving"):
        read(tflite)


def test_other_files_keep_their_words(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(BadFileError, match="is a folder, not a regular file"):
        read_model_info(tmp_path / "folder")
    (tmp_path / "x.keras").write_bytes(b"not a zip")
    with pytest.raises(BadFileError, match="not a zip archive"):
        read_model_info(tmp_path / "x.keras")
