"""Using a trained model: model files with what inference needs, classify / detect, export.

- `ModelInfo` (class names, input size, resize rule, box format, post-processing) and
  `save_model` / `load_model` / `read_model_info` for `.keras` files that plain Keras loads
  too (from `cvbench.utils.model_file`, re-exported here).
- `classify` / `detect` on paths, folders, arrays or a tf.data dataset; `write_coco_results`;
  `draw_results`;
  `export_for_serving` (SavedModel / TFLite with softmax + top-k or decoding + NMS in the graph)
  and `read_export_info` (the `ModelInfo` an export carries).

The names are imported on first use, so that importing a light module of this package
(`cvbench.inference.images`, `.outputs`) does not load Keras: `cvbench predict` refuses a bad
model file or output path in a fraction of a second.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Classification": "cvbench.inference.classification",
    "classify": "cvbench.inference.classification",
    "coco_results": "cvbench.inference.coco_results",
    "write_coco_results": "cvbench.inference.coco_results",
    "Detection": "cvbench.inference.detection",
    "detect": "cvbench.inference.detection",
    "draw_classification": "cvbench.inference.draw",
    "draw_detection": "cvbench.inference.draw",
    "draw_results": "cvbench.inference.draw",
    "export_for_serving": "cvbench.inference.export",
    "read_export_info": "cvbench.inference.export_info",
    "default_info": "cvbench.inference.resolve",
    "ModelInfo": "cvbench.utils.model_file",
    "load_model": "cvbench.utils.model_file",
    "read_model_info": "cvbench.utils.model_file",
    "save_model": "cvbench.utils.model_file",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cvbench.inference' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(_LAZY) | {n for n in globals() if n.startswith("__")})
