"""Tiny models of built-in Keras layers whose outputs the tests know exactly, for the
inference API (`cvbench.inference`) and `cvbench predict`.

* `channel_classifier`: logits = `0.1 *` the per-channel mean of the input, so an image whose
  channel means are (10, 30, 20) gives logits (1, 3, 2): class 1 ("green") first, then
  2 ("blue"), then 0 ("red").
* `constant_detector`: the SSD output contract (`{"boxes": (B, N, 4) box codes,
  "classes": (B, N, C) logits}`) for the 4 anchors of `DETECTOR_ANCHORS` on a 64 x 64 input
  (one level, stride 32, side 32: the quarters `[0, 0, .5, .5]`, `[0, .5, .5, 1]`,
  `[.5, 0, 1, .5]`, `[.5, .5, 1, 1]`); box codes 0 (so each box is its anchor) and fixed
  logits `DETECTOR_LOGITS`, whatever the image.
"""

from __future__ import annotations

import keras
import numpy as np

from cvbench.inference import ModelInfo

CLASS_NAMES = ("red", "green", "blue")
DETECTOR_NAMES = ("circle", "square")
DETECTOR_ANCHORS = {
    "min_level": 5,
    "max_level": 5,
    "anchor_scale": 1.0,
    "aspect_ratios": [1.0],
    "scales_per_octave": 1,
}
#: Anchor 0 (top-left quarter) class 1 at logit 2 (score sigmoid(2) = 0.880797), anchor 3
#: (bottom-right quarter) class 0 at logit 1 (sigmoid(1) = 0.731059), anchor 1 class 0 at
#: logit -1 (0.268941); everything else -10 (4.5e-5).
DETECTOR_LOGITS = np.full((4, 2), -10.0, np.float32)
DETECTOR_LOGITS[0, 1] = 2.0
DETECTOR_LOGITS[3, 0] = 1.0
DETECTOR_LOGITS[1, 0] = -1.0


def classifier_info(**kwargs) -> ModelInfo:
    """The `ModelInfo` of `channel_classifier` (8 x 8 input, "center_crop" at 1.0 unless
    overridden)."""
    settings = {"crop_fraction": 1.0, **kwargs}
    return ModelInfo(task="classification", class_names=CLASS_NAMES, image_size=(8, 8), **settings)


def channel_classifier() -> keras.Model:
    """(B, 8, 8, 3) -> (B, 3) logits = 0.1 * channel means."""
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3, name="logits"),
        ]
    )
    model.get_layer("logits").set_weights([0.1 * np.eye(3, dtype="float32"), np.zeros(3)])
    return model


def detector_info(**kwargs) -> ModelInfo:
    """The `ModelInfo` of `constant_detector` ("stretch", NMS at IoU 0.5)."""
    detection = {
        "anchors": DETECTOR_ANCHORS,
        "scales": [10.0, 10.0, 5.0, 5.0],
        "postprocess": {
            "iou_threshold": 0.5,
            "score_threshold": 1e-8,
            "max_per_class": 10,
            "max_total": 10,
        },
    }
    settings = {"resize": "stretch", "detection": detection, **kwargs}
    return ModelInfo(task="detection", class_names=DETECTOR_NAMES, image_size=(64, 64), **settings)


def constant_detector() -> keras.Model:
    """(B, 64, 64, 3) -> {"boxes": zeros (B, 4, 4), "classes": DETECTOR_LOGITS (B, 4, 2)}."""
    inputs = keras.Input((64, 64, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(inputs)
    codes = keras.layers.Dense(16, kernel_initializer="zeros", name="codes")(pooled)
    logits = keras.layers.Dense(8, kernel_initializer="zeros", name="class_logits")(pooled)
    model = keras.Model(
        inputs,
        {
            "boxes": keras.layers.Reshape((4, 4))(codes),
            "classes": keras.layers.Reshape((4, 2))(logits),
        },
    )
    layer = model.get_layer("class_logits")
    layer.set_weights([np.zeros((3, 8), "float32"), DETECTOR_LOGITS.reshape(-1)])
    return model
