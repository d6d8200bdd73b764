"""The model file's `ModelInfo` inside a serving export, for clients that need more than the
signature (class names, input size, resize rule, post-processing settings).

- SavedModel: the `"model_info"` of the folder's `cvbench_export.json` (the export marker,
  `cvbench.inference.outputs.EXPORT_MARKER`; TF Serving ignores the file).
- TFLite: a flatbuffer metadata entry named `cvbench.json` (the `.keras` entry's name) whose
  buffer is the same JSON, UTF-8 (`Model.metadata`, readable with the TFLite schema or
  `flatbuffers`; the interpreter ignores it).

`export_marker(info, format)` writes the SavedModel's marker, `with_tflite_info` the TFLite
entry, both from `info_json`; `read_export_info(path)` reads either back, with the limits and
checks of `read_model_info` (`MAX_JSON_BYTES`, JSON depth bounded by `loads_json`,
`info_from_json`); a marker or TFLite path that is not a regular file (a FIFO) is refused
before a byte is read, and a TFLite file is mapped, not read whole.
"""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

from cvbench.inference.outputs import EXPORT_MARKER, TFLITE_IDENTIFIER
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import loads_json, open_input
from cvbench.utils.model_file import INFO_ENTRY, MAX_JSON_BYTES, ModelInfo, info_from_json

#: The version of the SavedModel marker (`export_marker`; `is_cvbench_export` checks it).
_MARKER_VERSION = 1


def info_json(info: ModelInfo) -> str:
    """`info` as the JSON text both formats hold."""
    return json.dumps(info.to_dict(), sort_keys=True)


def export_marker(info: ModelInfo, format: str) -> str:
    """The text of a SavedModel export's `EXPORT_MARKER`: what wrote it, and `info` (encoded
    as `info_json` encodes it: sorted keys)."""
    marker = {"cvbench_export": _MARKER_VERSION, "format": format, "task": info.task,
              "model_info": info.to_dict()}  # fmt: skip
    return json.dumps(marker, sort_keys=True) + "\n"


def with_tflite_info(flatbuffer: bytes, info: ModelInfo) -> bytes:
    """The TFLite `flatbuffer` with `info` as its `cvbench.json` metadata entry (an entry of
    that name already there is replaced)."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))
    buffer = schema.BufferT()
    buffer.data = list(info_json(info).encode("utf-8"))
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = INFO_ENTRY
    entry.buffer = len(model.buffers) - 1
    others = [m for m in (model.metadata or []) if _name(m) != INFO_ENTRY]
    model.metadata = [*others, entry]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def read_export_info(path: str | os.PathLike) -> ModelInfo:
    """The `ModelInfo` an export of `export_for_serving` carries (module docstring).

    Raises:
        BadFileError: (a `ValueError`) for a path that is no cvbench export, holds no info
            (an export of an older cvbench), an info over `MAX_JSON_BYTES` or a malformed
            one, naming the path.
    """
    path = Path(path)
    if path.is_dir():
        marker = _json(_read_bounded(path / EXPORT_MARKER), path / EXPORT_MARKER)
        data = marker.get("model_info") if isinstance(marker, dict) else None
    else:
        data = _tflite_info(path)
    if data is None:
        raise BadFileError(f"{path}: the export holds no ModelInfo (exported by an older cvbench?)")
    return info_from_json(data, path=path)


def _read_bounded(path: Path) -> bytes:
    """At most `MAX_JSON_BYTES` of the regular file `path` (`open_input`: a FIFO is refused,
    not waited on)."""
    try:
        with open_input(path, what="export marker") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as err:
        raise BadFileError(f"{path}: not readable ({err.strerror or err})") from None
    if len(data) > MAX_JSON_BYTES:
        raise BadFileError(f"{path}: over the limit of {MAX_JSON_BYTES} bytes")
    return data


def _json(data: bytes, path: Path):
    return loads_json(data, source=str(path))


def _tflite_info(path: Path):
    """The decoded `cvbench.json` entry of a TFLite file, None without one. Reads the
    flatbuffer lazily (the generated accessors, not the object API that copies every
    weight into Python lists)."""

    try:
        with open_input(path, what="TFLite file") as f:
            if os.fstat(f.fileno()).st_size < 8:
                raise BadFileError(f"{path}: not a TFLite file (no TFL3 identifier)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _tflite_entry(path, buf)
    except (FileNotFoundError, BadFileError):
        raise
    except OSError as err:
        raise BadFileError(f"{path}: not readable ({err.strerror or err})") from None


def _tflite_entry(path: Path, buf: mmap.mmap):
    """The decoded `cvbench.json` entry of the mapped TFLite flatbuffer `buf`, or None."""
    from tensorflow.lite.python import schema_py_generated as schema

    if buf[4:8] != TFLITE_IDENTIFIER:
        raise BadFileError(f"{path}: not a TFLite file (no TFL3 identifier)")
    try:
        model = schema.Model.GetRootAs(buf, 0)
        for i in range(model.MetadataLength()):
            entry = model.Metadata(i)
            if (entry.Name() or b"").decode("utf-8", "replace") != INFO_ENTRY:
                continue
            if not 0 <= entry.Buffer() < model.BuffersLength():
                raise BadFileError(f"{path}: {INFO_ENTRY} names buffer {entry.Buffer()}, not there")
            buffer = model.Buffers(entry.Buffer())
            if buffer.DataLength() > MAX_JSON_BYTES:
                limit = f"over the limit of {MAX_JSON_BYTES} bytes"
                raise BadFileError(f"{path}: {INFO_ENTRY} is {limit}")
            data = buffer.DataAsNumpy().tobytes() if buffer.DataLength() else b""
            return _json(data, path)
    except BadFileError:
        raise
    except Exception as err:  # the generated reader raises anything on foreign bytes
        raise BadFileError(f"{path}: not a TFLite file ({type(err).__name__})") from None
    return None


def _name(entry) -> str:
    name = entry.name
    return name.decode("utf-8") if isinstance(name, bytes) else str(name)
