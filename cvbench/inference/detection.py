"""Detecting objects with a trained SSD: boxes in original-image pixels, class names, scores.

The model outputs box codes and class logits for its anchors; `detect` decodes them with
`cvbench.detection.predict.Decoder` (the one path from outputs to boxes), configured by the
model's `ModelInfo.detection` (anchors, box-coder scales, NMS settings), keeps the detections
scoring above `score_threshold`, and maps the boxes from the model input back to each original image
(`cvbench.inference.images.Geometry`: per axis for "stretch", through the crop for
"center_crop"), clipped to it, in the requested pixel format (`box_formats`: "xyxy" by
default, "xywh" for COCO, "yxyx").

Usage (with a model file written by `cvbench train`; tests/inference runs it on a tiny one):

    from cvbench.inference.detection import detect
    detections = detect("ssd.keras", "images/")
    detections[0].boxes  # (K, 4) [xmin, ymin, xmax, ymax] pixels
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from cvbench.detection.predict import Decoder
from cvbench.inference.box_formats import check_box_format, from_yxyx
from cvbench.inference.classification import finite_or_none
from cvbench.inference.images import (
    MAX_IMAGE_PIXELS,
    Batch,
    OnSkip,
    ReadOptions,
    Source,
    predict_batches,
)
from cvbench.inference.resolve import resolve_model
from cvbench.utils.model_file import DISPLAY_SCORE_THRESHOLD, ModelInfo, check_score_threshold

#: Default score threshold of `detect`: `cvbench.utils.model_file.DISPLAY_SCORE_THRESHOLD`
#: (what is worth showing; use a low one, such as 0.001 or `COCO_SCORE_THRESHOLD`, 1e-8, for
#: COCO evaluation, which needs the low-scored detections too).
SCORE_THRESHOLD = DISPLAY_SCORE_THRESHOLD


@dataclass(frozen=True, eq=False)
class Detection:
    """The detections of one image, by decreasing score.

    Attributes:
        source: the image's path, or its index in an array or dataset input.
        image_size: `(height, width)` of the original image in pixels.
        boxes: `(K, 4)` float32 boxes in pixels of the original image, in `box_format`.
        scores: `(K,)` float32 scores (sigmoid of the logits).
        class_ids: `(K,)` int32 class indices.
        class_names: the `K` class names (`ModelInfo.class_names`).
        box_format: "xyxy" (`[xmin, ymin, xmax, ymax]`), "xywh" or "yxyx".
    """

    source: Source
    image_size: tuple[int, int]
    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    class_names: tuple[str, ...]
    box_format: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the line `cvbench predict --json` prints); a box coordinate or
        score that is not finite (a model that outputs NaN) is None (JSON `null`)."""
        return {
            "source": self.source,
            "image_size": list(self.image_size),
            "box_format": self.box_format,
            "detections": [
                {
                    "box": [finite_or_none(v) for v in box],
                    "class_id": int(c),
                    "class_name": name,
                    "score": finite_or_none(s),
                }
                for box, c, name, s in zip(
                    self.boxes, self.class_ids, self.class_names, self.scores, strict=True
                )
            ],
        }


def detect(
    model: Any,
    inputs: Any,
    *,
    info: ModelInfo | None = None,
    score_threshold: float = SCORE_THRESHOLD,
    box_format: str = "xyxy",
    batch_size: int = 8,
    skip_corrupt: bool = False,
    on_skip: OnSkip | None = None,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
) -> list[Detection]:
    """Detects objects in images with an SSD.

    Args:
        model: a `keras.Model` taking `(B, H, W, 3)` float32 RGB in `[0, 255]` and returning
            `{"boxes": (B, N, 4) box codes, "classes": (B, N, C) logits}`, or the path of a
            `.keras` file with its `ModelInfo`.
        inputs: image paths or folders, an array `(H, W, 3)` / `(B, H, W, 3)`, a list of
            arrays, or a `tf.data.Dataset` of images (see `cvbench.inference.images`).
        info: the model's `ModelInfo`; default the file's. Required with a model object
            (`default_info(model, task="detection")` states the defaults: its input size,
            "stretch", SSD320 v1.2's anchors and NMS).
        score_threshold: keep detections scoring above it, in `[0, 1)`.
        box_format: "xyxy" (`[xmin, ymin, xmax, ymax]`), "xywh" (COCO
            `[xmin, ymin, width, height]`) or "yxyx" (`[ymin, xmin, ymax, xmax]`), pixels.
        batch_size: images per model call (fewer where `batch_size` model inputs would hold
            more than `max_image_pixels` pixels).
        skip_corrupt: skip image files that cannot be read or are over `max_image_pixels`
            (no result for them) instead of raising.
        on_skip: called with the `cvbench.inference.images.ImageFileError` of each file
            skipped.
        max_image_pixels: the largest width x height of an image file decoded (checked from
            its header first).

    Returns:
        One `Detection` per image, in input order; at most the info's `max_total` boxes each.

    Raises:
        ValueError: for a bad `score_threshold` or `box_format`, a classifier, a model file
            or object without `ModelInfo`, an `info` that contradicts the model (an
            `image_size` that is not its fixed input size, a class count that is not its
            outputs'), or bad inputs (naming the file).
        FileNotFoundError: for a missing model or image file.
        BadFileError: (a `ValueError`) for a malformed model file, a model input
            (`ModelInfo.image_size`) over `max_image_pixels`, or an image file that cannot be
            read, is corrupt or is over a limit (unless `skip_corrupt`).
    """
    check_box_format(box_format)
    score_threshold = check_score_threshold(score_threshold)
    model, info = resolve_model(model, info=info, task="detection")
    read = ReadOptions(batch_size, skip_corrupt, on_skip, max_image_pixels)
    results_of = functools.partial(
        _detections,
        info=info,
        decoder=Decoder(info.detection, info.image_size),
        score_threshold=score_threshold,
        box_format=box_format,
    )
    return predict_batches(model, inputs, info, results_of, read=read)


def _detections(
    outputs: Any,
    batch: Batch,
    *,
    info: ModelInfo,
    decoder: Decoder,
    score_threshold: float,
    box_format: str,
) -> list[Detection]:
    """The `Detection` of each image of `batch` from the SSD's outputs: decoded, NMS-ed,
    scoring above `score_threshold`, in `box_format` pixels of the original image."""
    if np.shape(outputs["classes"])[-1] != info.num_classes:
        raise ValueError(
            f"the detector outputs {np.shape(outputs['classes'])[-1]} class logits per "
            f"anchor for {info.num_classes} class names"
        )
    dets = decoder(outputs, score_threshold=score_threshold)
    height, width = info.image_size
    results = []
    for row, geometry in enumerate(batch.geometries):
        k = int(dets["num_detections"][row])
        model_pixels = dets["boxes"][row, :k] * np.array([height, width, height, width])
        boxes = from_yxyx(geometry.to_original(model_pixels), box_format)
        class_ids = dets["classes"][row, :k].astype(np.int32)
        results.append(
            Detection(
                source=batch.sources[row],
                image_size=geometry.original_size,
                boxes=boxes.astype(np.float32).reshape(-1, 4),
                scores=dets["scores"][row, :k].astype(np.float32),
                class_ids=class_ids,
                class_names=tuple(info.class_names[c] for c in class_ids),
                box_format=box_format,
            )
        )
    return results
