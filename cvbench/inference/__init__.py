"""Using a trained model: model files with what inference needs, classify / detect, export.

- `ModelInfo` (class names, input size, resize rule, box format, post-processing) and
  `save_model` / `load_model` / `read_model_info` for `.keras` files that plain Keras loads
  too (from `cvbench.utils.model_file`, re-exported here).
- `classify` / `detect` on paths, folders, arrays or a tf.data dataset; `write_coco_results`;
  `draw_results`;
  `export_model` (SavedModel / TFLite with softmax + top-k or decoding + NMS in the graph).
"""

from cvbench.inference.classification import Classification, classify
from cvbench.inference.coco_results import coco_results, write_coco_results
from cvbench.inference.detection import Detection, detect
from cvbench.inference.draw import draw_classification, draw_detection, draw_results
from cvbench.inference.export import export_model
from cvbench.inference.resolve import default_info
from cvbench.utils.model_file import ModelInfo, load_model, read_model_info, save_model

__all__ = [
    "Classification",
    "Detection",
    "ModelInfo",
    "classify",
    "coco_results",
    "default_info",
    "detect",
    "draw_classification",
    "draw_detection",
    "draw_results",
    "export_model",
    "load_model",
    "read_model_info",
    "save_model",
    "write_coco_results",
]
