"""From an SSD's outputs to detections: the one path every caller takes.

An SSD outputs box codes and class logits for its anchors. What turns them into boxes are
the detection settings a model file records as `ModelInfo.detection`, the typed
`cvbench.utils.model_file.DetectionSettings` (anchors: `multiscale_anchors` kwargs, box-coder
scales, NMS settings; `ssd_detection_settings` builds them, `detection_settings` gives their
JSON object). `Decoder(settings, image_size)` builds the anchors once and
decodes a batch with `cvbench.detection.postprocess.postprocess`: boxes
`[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` of the model input, clipped to it. Its
callers only map those to pixels, each for its edge:

- `predict_detections`: images stretched to the model input, pixel corners of each original;
- `predict_coco`: an evaluation stream, COCO result dicts
  (`cvbench.detection.coco_eval.detections_to_coco`; `coco_eval.evaluate_coco` scores them);
- `cvbench.inference.detect`: image files, through the file's resize geometry;
- `DetectionTask.evaluate` (through `predict_coco`) with the settings its model files record.

The SavedModel / TFLite export runs the same settings as a TensorFlow graph
(`cvbench.inference.serving`, tested equal to `Decoder`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cvbench.detection import box_coder, box_ops
from cvbench.detection.anchors import anchor_settings, multiscale_anchors
from cvbench.detection.coco_eval import detections_to_coco
from cvbench.detection.postprocess import (
    IOU_THRESHOLD,
    MAX_PER_CLASS,
    MAX_TOTAL,
    postprocess,
    warn_nan_anchors,
)
from cvbench.utils.model_file import COCO_SCORE_THRESHOLD, DetectionSettings, NmsSettings

#: The keys of `detection_settings()["postprocess"]` (the fields of `NmsSettings`).
POSTPROCESS_KEYS = tuple(f.name for f in dataclasses.fields(NmsSettings))


def detection_settings(
    *,
    scales: Sequence[float] = box_coder.DEFAULT_SCALES,
    iou_threshold: float = IOU_THRESHOLD,
    score_threshold: float = COCO_SCORE_THRESHOLD,
    max_per_class: int = MAX_PER_CLASS,
    max_total: int = MAX_TOTAL,
    anchors: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON object of the `DetectionSettings` (`ModelInfo.detection`) that turn an SSD's
    outputs into boxes: a fresh dict, the caller's to change. The defaults are SSD320 v1.2's
    (its recipe's knobs: `ssd320_v1.2`); `DetectionTask.detection_settings` is the same
    object built from the task's recipe.

    Args:
        scales: box-coder scales `(y, x, h, w)`.
        iou_threshold: NMS IoU threshold.
        score_threshold: scores must be above it (`COCO_SCORE_THRESHOLD`, 1e-8, the COCO
            evaluation setting).
        max_per_class: kept boxes per class.
        max_total: kept boxes per image.
        anchors: `multiscale_anchors` keyword arguments (default `anchor_settings()`).

    Example:
        >>> detection_settings(max_total=5)["postprocess"]["max_total"]
        5
    """
    return ssd_detection_settings(
        scales=scales,
        nms=NmsSettings(
            iou_threshold=iou_threshold,
            score_threshold=score_threshold,
            max_per_class=max_per_class,
            max_total=max_total,
        ),
        anchors=anchors,
    ).to_dict()


def ssd_detection_settings(
    *,
    scales: Sequence[float] = box_coder.DEFAULT_SCALES,
    nms: NmsSettings | None = None,
    anchors: Mapping[str, Any] | None = None,
) -> DetectionSettings:
    """The typed `DetectionSettings` of an SSD: SSD320 v1.2's anchors (`anchor_settings()`)
    unless `anchors` says otherwise, the box coder's `scales`, the NMS settings `nms`
    (default `NmsSettings()`, SSD320 v1.2's).

    Example:
        >>> ssd_detection_settings(nms=NmsSettings(max_total=5)).postprocess.max_total
        5
    """
    return DetectionSettings(
        anchors=anchor_settings() if anchors is None else anchors,
        scales=tuple(scales),
        postprocess=NmsSettings() if nms is None else nms,
    )


@dataclasses.dataclass(frozen=True, eq=False)
class Decoder:
    """Decodes an SSD's outputs with its detection settings (module docstring).

    Args:
        settings: `ModelInfo.detection` (a `DetectionSettings`, or its JSON object, checked:
            `detection_settings`).
        image_size: `(height, width)` of the model input.

    Attributes:
        anchors: float32 `(N, 4)`, `[ymin, xmin, ymax, xmax]` normalized.

    Example:
        >>> Decoder(detection_settings(), (320, 320)).anchors.shape
        (12804, 4)
    """

    settings: DetectionSettings
    image_size: tuple[int, int]
    anchors: np.ndarray = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", DetectionSettings.from_dict(self.settings))
        size = (int(self.image_size[0]), int(self.image_size[1]))
        object.__setattr__(self, "image_size", size)
        anchors = multiscale_anchors(size, **self.settings.anchors)
        object.__setattr__(self, "anchors", anchors)

    @classmethod
    def for_model(cls, model: Any, settings: Mapping[str, Any] | None = None) -> Decoder:
        """The decoder of a Keras SSD with a fixed input size (default settings SSD320's)."""
        shape = tuple(model.input_shape)
        return cls(ssd_detection_settings() if settings is None else settings, shape[1:3])

    def __call__(self, outputs: Mapping[str, Any], *, score_threshold: float | None = None):
        """Detections of a batch of outputs `{"boxes": (B, N, 4) codes, "classes": (B, N, C)
        logits}`: `postprocess`'s padded numpy dict (`"boxes"` normalized, `"scores"`,
        `"classes"`, `"num_detections"`).

        Args:
            outputs: the model's outputs (any array type).
            score_threshold: keep scores above it too; the settings' own threshold still
                applies (candidates below it cannot change which higher-scored boxes greedy
                NMS keeps, so a higher threshold gives a prefix of the same detections).
        """
        nms = self.settings.postprocess
        if score_threshold is not None:
            threshold = max(float(score_threshold), nms.score_threshold)
            nms = dataclasses.replace(nms, score_threshold=threshold)
        scales = self.settings.scales
        return postprocess(
            outputs["boxes"], outputs["classes"], self.anchors, scales=scales, **nms.to_dict()
        )


def predict_detections(
    model: Any,
    images: Any,
    original_sizes: Any,
    *,
    batch_size: int = 32,
    settings: Mapping[str, Any] | None = None,
    score_threshold: float | None = None,
) -> list[dict[str, np.ndarray]]:
    """Runs an SSD on images stretched to its input and returns each image's detections in
    its original pixels.

    The model input is a fixed resize of the original image, so normalized coordinates are the
    same in both and a pixel box is the normalized box times the original height and width.
    (`cvbench.inference.detect` takes image files and the model file's own resize rule.)

    Args:
        model: an SSD (input `(B, H, W, 3)`, outputs `{"boxes", "classes"}`).
        images: `(B, H, W, 3)` images already resized to the model's input size, `[0, 255]`.
        original_sizes: `(B, 2)` original `(height, width)` of each image in pixels.
        batch_size: `model.predict` batch size.
        settings: the detection settings (`ModelInfo.detection`); default SSD320 v1.2's.
        score_threshold: keep detections scoring above it (and above the settings').

    Returns:
        One dict per image: `"boxes"` float32 `(K, 4)` pixel corners
        `[ymin, xmin, ymax, xmax]`, `"scores"` `(K,)`, `"classes"` int32 `(K,)` in
        `[0, num_classes)`.

    Raises:
        ValueError: if `original_sizes` does not have shape `(B, 2)`.
    """
    sizes = np.asarray(original_sizes, dtype=np.float32)
    if sizes.ndim != 2 or sizes.shape[1] != 2 or sizes.shape[0] != len(images):
        raise ValueError(f"original_sizes must have shape ({len(images)}, 2); got {sizes.shape}")
    decoder = Decoder.for_model(model, settings)
    dets = decoder(
        model.predict(images, batch_size=batch_size, verbose=0), score_threshold=score_threshold
    )
    results = []
    for i, (height, width) in enumerate(sizes):
        k = dets["num_detections"][i]
        pixels = box_ops.boxes_to_pixels(dets["boxes"][i, :k], height, width)
        results.append(
            {
                "boxes": pixels.astype(np.float32),
                "scores": dets["scores"][i, :k],
                "classes": dets["classes"][i, :k],
            }
        )
    return results


def predict_coco(
    model: Any,
    dataset: Any,
    coco_category_ids: Sequence[int],
    *,
    settings: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[int]]:
    """Runs an SSD over an evaluation stream and returns COCO result dicts.

    Args:
        model: an SSD (dict outputs), its input fixed in size.
        dataset: `(images, meta)` batches of `cvbench.data.coco_dataset(training=False)`
            (meta: `image_id` [B], `image_size` [B, 2], `valid` [B]).
        coco_category_ids: the label map (the COCO id of each class index).
        settings: the detection settings (`ModelInfo.detection`); default SSD320 v1.2's.

    Returns:
        `(detections, image_ids)`: the result dicts of the real (not padding) images, in
        original pixels and COCO ids, and the ids of every image seen.
    """
    import keras

    decoder = Decoder.for_model(model, settings)
    detections: list[dict[str, Any]] = []
    image_ids: list[int] = []
    nan_anchors = 0
    for images, meta in dataset:
        dets = decoder(model.predict_on_batch(keras.ops.convert_to_numpy(images)))
        valid = np.asarray(meta["valid"], bool)
        nan_anchors += int(dets["nan_anchors"][valid].sum())
        ids = np.asarray(meta["image_id"])
        detections += detections_to_coco(
            ids,
            dets["boxes"],
            dets["scores"],
            dets["classes"],
            dets["num_detections"],
            np.asarray(meta["image_size"]),
            coco_category_ids,
            valid=valid,
        )
        image_ids += ids[valid].tolist()
    warn_nan_anchors(nan_anchors, len(image_ids))
    return detections, image_ids
