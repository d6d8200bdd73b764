"""An input that is not a regular file is refused by its type, read by `stat` before any
open (`cvbench.utils.files.open_input`): a socket is named as a socket, and a FIFO neither
blocks nor is opened.

Before: `open_input` opened first and checked the descriptor; `open` of a socket fails with
ENXIO, so `cvbench predict SOCK IMAGE`, `cvbench predict MODEL SOCK` and `cvbench export SOCK`
said only "SOCK: No such device or address".
"""

from __future__ import annotations

import os
import socket

import pytest

from cvbench import cli
from cvbench.utils import files
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic


@pytest.fixture
def sock(tmp_path):
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        yield path


@pytest.fixture
def never_opened(monkeypatch):
    """Fails the test when `open_input` calls `os.open`."""
    opened = []
    monkeypatch.setattr(files.os, "open", lambda *args, **kwargs: opened.append(args))
    yield opened
    monkeypatch.undo()
    assert opened == []


def test_a_socket_is_named_as_a_socket(sock):
    with pytest.raises(BadFileError) as e:
        files.open_input(sock, what="image")
    assert str(e.value) == f"image {sock} is a socket, not a regular file"


@pytest.mark.parametrize("kind", ["socket", "fifo", "folder"])
def test_the_type_is_checked_before_any_open(tmp_path, sock, never_opened, kind):
    path = {"socket": sock, "fifo": tmp_path / "f", "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading without O_NONBLOCK would wait for a writer
    name = {"socket": "a socket", "fifo": "a FIFO (named pipe)", "folder": "a folder"}[kind]
    with pytest.raises(BadFileError) as e:
        files.open_input(path, what="model file")
    assert str(e.value) == f"model file {path} is {name}, not a regular file"


def test_a_regular_file_is_still_opened(tmp_path):
    (tmp_path / "a").write_bytes(b"abc")
    with files.open_input(tmp_path / "a") as f:
        assert f.read() == b"abc"


@pytest.mark.parametrize("where", ["model", "image"])
def test_predict_names_a_socket(tmp_path, sock, capsys, monkeypatch, where):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.predict",))
    image = tmp_path / "i.png"
    image.write_bytes(b"")
    argv = [str(sock), str(image)] if where == "model" else [str(tmp_path / "m.keras"), str(sock)]
    if where == "image":
        from inference_models import channel_classifier, classifier_info

        from cvbench.inference import save_model

        save_model(channel_classifier(), tmp_path / "m.keras", classifier_info())
    assert cli.main(["predict", *argv]) != 0
    err = capsys.readouterr().err
    what = "model file" if where == "model" else "image"
    assert err.startswith(f"cvbench predict: error: {what} {sock} is a socket, not a regular file")
    assert err.count("\n") == 1


def test_export_names_a_socket(tmp_path, sock, capsys, monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.export",))
    assert cli.main(["export", str(sock), "--output", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert err == f"cvbench export: error: model file {sock} is a socket, not a regular file\n"
    assert not (tmp_path / "out").exists()
