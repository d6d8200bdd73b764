"""The model file's `ModelInfo` inside a serving export, for clients that need more than the
signature (class names, input size, resize rule, post-processing settings).

- SavedModel: the `"model_info"` of the folder's `cvbench_export.json` (the export marker,
  `cvbench.inference.outputs.EXPORT_MARKER`; TF Serving ignores the file).
- TFLite: a flatbuffer metadata entry named `cvbench.json` (the `.keras` entry's name) whose
  buffer is the same JSON, UTF-8 (`Model.metadata`, readable with the TFLite schema or
  `flatbuffers`; the interpreter ignores it).

`read_export_info(path)` reads either back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cvbench.inference.outputs import EXPORT_MARKER
from cvbench.utils.model_file import INFO_ENTRY, ModelInfo


def info_json(info: ModelInfo) -> str:
    """`info` as the JSON text both formats hold."""
    return json.dumps(info.to_dict(), sort_keys=True)


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
        ValueError: for a path that is no cvbench export or holds no info (an export of an
            older cvbench), naming the path.
    """
    path = Path(path)
    if path.is_dir():
        try:
            marker = json.loads((path / EXPORT_MARKER).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: no readable {EXPORT_MARKER} ({err})") from None
        data = marker.get("model_info") if isinstance(marker, dict) else None
    else:
        data = _tflite_info(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the export holds no ModelInfo (exported by an older cvbench?)")
    return ModelInfo.from_dict(data)


def _tflite_info(path: Path) -> dict | None:
    from tensorflow.lite.tools import flatbuffer_utils

    try:
        model = flatbuffer_utils.read_model_from_bytearray(bytearray(path.read_bytes()))
    except Exception as err:  # the flatbuffers reader raises anything on foreign bytes
        raise ValueError(f"{path}: not a TFLite file ({type(err).__name__})") from None
    for entry in model.metadata or []:
        if _name(entry) == INFO_ENTRY:
            return json.loads(bytes(model.buffers[entry.buffer].data).decode("utf-8"))
    return None


def _name(entry) -> str:
    name = entry.name
    return name.decode("utf-8") if isinstance(name, bytes) else str(name)
