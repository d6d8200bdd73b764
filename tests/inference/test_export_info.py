"""The ModelInfo inside an export, read back with the limits and checks of a `.keras` file's:
crafted markers and TFLite metadata get one `BadFileError` naming the file, never a
TypeError, a huge parse or a traceback from the flatbuffer reader."""

from __future__ import annotations

import json

import pytest
from tensorflow.lite.python import schema_py_generated as schema
from tensorflow.lite.tools import flatbuffer_utils

from cvbench.inference.export_info import (
    export_marker,
    info_json,
    read_export_info,
    with_tflite_info,
)
from cvbench.inference.outputs import EXPORT_MARKER, is_cvbench_export
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import record_tree
from cvbench.utils.model_file import INFO_ENTRY, MAX_JSON_BYTES, ModelInfo

INFO = ModelInfo(task="classification", class_names=("cat", "dog"), image_size=(64, 48))


def empty_tflite() -> bytes:
    """A flatbuffer with no graph: enough for the metadata (the reader never runs it)."""
    model = schema.ModelT()
    model.version = 3
    model.subgraphs = []
    model.buffers = [schema.BufferT()]  # buffer 0 is the empty sentinel by convention
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def tflite_with_entry(payload: bytes, *, buffer_index: int | None = None) -> bytes:
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(empty_tflite()))
    buffer = schema.BufferT()
    buffer.data = list(payload)
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = INFO_ENTRY
    entry.buffer = len(model.buffers) - 1 if buffer_index is None else buffer_index
    model.metadata = [entry]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def saved_model_folder(tmp_path, text: str):
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / EXPORT_MARKER).write_text(text, encoding="utf-8")
    return folder


def test_tflite_round_trip_and_one_encoding(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(with_tflite_info(empty_tflite(), INFO))
    assert read_export_info(path) == INFO
    # a second write replaces the entry instead of adding one
    twice = with_tflite_info(path.read_bytes(), INFO)
    entries = flatbuffer_utils.read_model_from_bytearray(bytearray(twice)).metadata
    assert [e.name for e in entries] == [INFO_ENTRY.encode()]


def test_marker_round_trip_holds_info_json_verbatim(tmp_path):
    text = export_marker(INFO, "saved_model")
    assert info_json(INFO) in text  # the same text as the TFLite entry: one encoding
    marker = json.loads(text)
    assert (marker["cvbench_export"], marker["format"], marker["task"]) == (
        1, "saved_model", "classification",
    )  # fmt: skip
    folder = saved_model_folder(tmp_path, text)
    assert not is_cvbench_export(folder)  # known by cvbench's records only (#37 F)
    record_tree(folder)
    assert is_cvbench_export(folder)
    assert read_export_info(folder) == INFO


# each crafted file: what it holds, and the words the one error must have
MALFORMED = {
    "a list": (b"[1]", "is not a JSON object"),
    "class_names a number": (
        json.dumps({"task": "classification", "class_names": 5, "image_size": [2, 2]}).encode(),
        "class_names",
    ),
    "image_size a string": (
        json.dumps({"task": "classification", "class_names": ["a"], "image_size": "big"}).encode(),
        "image_size",
    ),
    "no task": (json.dumps({"class_names": ["a"], "image_size": [2, 2]}).encode(), "lacks task"),
    "not JSON": (b"{not json", "not valid JSON"),
    "not UTF-8": (b"\xff\xfe{}", "not valid JSON"),
    "a huge side": (
        json.dumps(
            {"task": "classification", "class_names": ["a"], "image_size": [1 << 20, 2]}
        ).encode(),
        "over the limit of 8192 pixels",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_tflite_info_is_one_error_naming_the_file(tmp_path, case):
    payload, words = MALFORMED[case]
    path = tmp_path / "crafted.tflite"
    path.write_bytes(tflite_with_entry(payload))
    with pytest.raises(BadFileError, match=words) as err:
        read_export_info(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_marker_info_is_one_error_naming_the_folder(tmp_path, case):
    payload, words = MALFORMED[case]
    try:
        info_text = payload.decode("utf-8")
        text = f'{{"cvbench_export": 1, "model_info": {info_text}}}'
    except UnicodeDecodeError:
        text = None
    folder = tmp_path / "export"
    folder.mkdir()
    if text is None:  # invalid UTF-8: the marker itself
        (folder / EXPORT_MARKER).write_bytes(payload)
    else:
        (folder / EXPORT_MARKER).write_text(text, encoding="utf-8")
    with pytest.raises(BadFileError, match=words if text is not None else "not valid JSON") as err:
        read_export_info(folder)
    assert str(folder) in str(err.value)


def test_an_oversized_tflite_entry_is_refused_before_parsing(tmp_path):
    # one byte over the limit, and not JSON at all: a parse would say "not valid JSON"
    path = tmp_path / "big.tflite"
    path.write_bytes(tflite_with_entry(b"x" * (MAX_JSON_BYTES + 1)))
    with pytest.raises(BadFileError, match=f"big.tflite: {INFO_ENTRY} is over the limit"):
        read_export_info(path)


def test_an_oversized_marker_is_refused(tmp_path):
    names = ["n"] * (MAX_JSON_BYTES // 4)  # '"n", ' is 5 bytes: over the limit
    marker = {"cvbench_export": 1, "model_info": {"task": "classification",
              "class_names": names, "image_size": [2, 2]}}  # fmt: skip
    folder = saved_model_folder(tmp_path, json.dumps(marker))
    with pytest.raises(BadFileError, match=f"{EXPORT_MARKER}: over the limit of {MAX_JSON_BYTES}"):
        read_export_info(folder)


def test_an_entry_naming_a_missing_buffer(tmp_path):
    path = tmp_path / "dangling.tflite"
    path.write_bytes(tflite_with_entry(b"{}", buffer_index=99))
    with pytest.raises(BadFileError, match="names buffer 99, not there"):
        read_export_info(path)


def test_no_info_and_foreign_files(tmp_path):
    plain = tmp_path / "plain.tflite"
    plain.write_bytes(empty_tflite())
    with pytest.raises(BadFileError, match="plain.tflite: the export holds no ModelInfo"):
        read_export_info(plain)
    foreign = tmp_path / "foreign.tflite"
    foreign.write_bytes(b"\xff\xff\xff\x7f" + b"TFL3" + b"\xff" * 8)  # a root past the end
    with pytest.raises(BadFileError, match="foreign.tflite: not a TFLite file"):
        read_export_info(foreign)
    foreign.write_bytes(b"a text file, not a flatbuffer")
    with pytest.raises(BadFileError, match="foreign.tflite: not a TFLite file .no TFL3"):
        read_export_info(foreign)
    folder = saved_model_folder(tmp_path, json.dumps({"cvbench_export": 1}))
    with pytest.raises(BadFileError, match="the export holds no ModelInfo"):
        read_export_info(folder)
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(BadFileError, match=f"nothing/{EXPORT_MARKER}: not readable"):
        read_export_info(empty)
