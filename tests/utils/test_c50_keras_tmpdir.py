"""A full temporary folder (TMPDIR) while Keras unpacks a `.keras` file: one line naming the
folder that filled and what to do, and nothing left in it (`cvbench.utils.model_file.
keras_temporaries`, around every `load_model` and `save_model`).

Before: `cvbench predict` / `cvbench export` of a model file with TMPDIR on a full disk said
only "No space left on device", and Keras' partial `tmpXXXXXXXX` folder stayed in TMPDIR.
"""

from __future__ import annotations

import os
import tempfile

import pytest
from inference_models import channel_classifier, classifier_info
from small_disk import SmallDisk

from cvbench import cli
from cvbench.inference import save_model
from cvbench.utils.io import HOST_TAG
from cvbench.utils.model_file import KERAS_TEMPORARIES_PREFIX, keras_temporaries, load_model


@pytest.fixture
def model_file(tmp_path):
    return save_model(channel_classifier(), tmp_path / "m.keras", classifier_info())


@pytest.fixture
def full_tmpdir(tmp_path, monkeypatch):
    """TMPDIR on an 8 KiB tmpfs: room for a folder and Keras' first small files, not for the
    whole archive."""
    disk = SmallDisk(tmp_path / "tmp")
    try:
        path = disk.mount(8 * 1024)
        monkeypatch.setattr(tempfile, "tempdir", str(path))
        yield path
        monkeypatch.undo()
    finally:
        disk.unmount()


def _message(tmpdir, model_file):
    return (
        f"the temporary folder {tmpdir} is full (No space left on device) while Keras unpacks "
        f"{model_file} there; free space in it or set TMPDIR to a folder with room"
    )


def test_load_model_names_the_full_folder_and_leaves_nothing(model_file, full_tmpdir):
    with pytest.raises(OSError) as e:
        load_model(model_file)
    assert str(e.value) == f"[Errno 28] {_message(full_tmpdir, model_file)}"
    assert os.listdir(full_tmpdir) == []
    assert tempfile.gettempdir() == str(full_tmpdir)  # the temporary folder is put back


@pytest.mark.parametrize("command", ["predict", "export"])
def test_the_commands_say_it_in_one_line(model_file, full_tmpdir, tmp_path, capsys, command):
    image = tmp_path / "i.png"
    from PIL import Image

    Image.new("RGB", (8, 8)).save(image)
    argv = [str(model_file), str(image)] if command == "predict" else [str(model_file)]
    argv += ["--output", str(tmp_path / "out")] if command == "export" else []
    assert cli.main([command, *argv]) == 1
    err = capsys.readouterr().err
    assert err == f"cvbench {command}: error: {_message(full_tmpdir, model_file)}\n"
    assert os.listdir(full_tmpdir) == []
    assert not (tmp_path / "out").exists()


def test_with_room_the_model_loads_and_leaves_nothing(model_file, tmp_path, monkeypatch):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    dead = tmpdir / f"{KERAS_TEMPORARIES_PREFIX}{HOST_TAG}-999999999-x"  # a killed process's
    dead.mkdir()
    model, info = load_model(model_file)
    assert info == classifier_info()
    assert os.listdir(tmpdir) == []  # Keras' folder removed, and the dead one
    save_model(model, tmp_path / "again.keras", info)
    assert os.listdir(tmpdir) == []


def test_keras_temporaries_restores_the_temporary_folder_after_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError), keras_temporaries("m.keras", "unpack") as folder:
        assert tempfile.gettempdir() == str(folder)
        raise RuntimeError("Keras failed")
    assert tempfile.tempdir == str(tmp_path) and not folder.exists()


def test_a_full_destination_is_not_blamed_on_the_temporary_folder(tmp_path):
    # review V F5: save_model into a full folder said "the temporary folder /tmp is full
    # ... set TMPDIR" though TMPDIR had room: the error names the file it could not write
    disk = SmallDisk(tmp_path / "dest")
    try:
        full = disk.mount(8 * 1024)
        with pytest.raises(OSError) as e:
            save_model(channel_classifier(), full / "m.keras", classifier_info())
        assert "temporary folder" not in str(e.value) and "TMPDIR" not in str(e.value)
        assert str(full) in str(e.value)  # the destination is named
    finally:
        disk.unmount()
