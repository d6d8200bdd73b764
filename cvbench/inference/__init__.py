"""Using a trained model: model files with what inference needs, classify / detect, export.

- `ModelInfo` (class names, input size, resize rule, box format, post-processing) and
  `save_model` / `load_model` / `read_model_info` for `.keras` files that plain Keras loads
  too (from `cvbench.utils.model_file`, re-exported here).
"""

from cvbench.utils.model_file import (
    ModelInfo,
    load_model,
    read_model_info,
    save_model,
)

__all__ = ["ModelInfo", "load_model", "read_model_info", "save_model"]
