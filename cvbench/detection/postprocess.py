"""Model outputs -> detections: sigmoid, decode, per-class NMS, fixed-size padded results.

SSD320 v1.2 post-processing (OD API `batch_non_max_suppression` with a sigmoid score
converter): per class keep the boxes scoring `> score_threshold` (1e-8), greedy NMS (a box is
dropped when its IoU with a kept box of the same class is `> iou_threshold`, 0.6), at most
`max_per_class` (100) per class; then the `max_total` (100) best over all classes, sorted
by score. NMS runs on the decoded boxes; the kept boxes are then clipped to the image (as
the OD API's clip window; boxes that clipping reduces to zero area are kept, unlike the
OD API's slim path; they match nothing in COCO evaluation). Equal scores are ordered
deterministically: lower class first, then lower anchor (also which of them a cut keeps).

Implementation: numpy, on the host (the model's outputs come back from `model.predict`
anyway). It is exact, and fast because a class's candidates are cut to those that can still
enter the overall top `max_total`: classes go in order of their best score, and a box below
the current `max_total`-th best score cannot change the result (greedy NMS of a class keeps
the same boxes among its top-scored prefix whatever follows). It runs under any Keras
backend; there is no graph version.

Boxes are `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` (see `box_ops`). A model's
detection settings (anchors, scales, these thresholds) and the paths from its outputs to
pixels are `cvbench.detection.predict`'s (`Decoder`).
"""

from __future__ import annotations

import heapq
import warnings
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from cvbench.detection import box_coder, box_ops
from cvbench.utils.model_file import COCO_SCORE_THRESHOLD, NmsSettings

#: Post-processing of SSD320 v1.2: the defaults of `cvbench.utils.model_file.NmsSettings`,
#: the part of the model contract that owns them.
IOU_THRESHOLD = NmsSettings.iou_threshold
MAX_PER_CLASS = NmsSettings.max_per_class
MAX_TOTAL = NmsSettings.max_total
#: `COCO_SCORE_THRESHOLD` (1e-8: COCO evaluation keeps every box), under its older name here.
SCORE_THRESHOLD = COCO_SCORE_THRESHOLD


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free for any finite or infinite x


def _iou_one_to_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    inter_h = np.maximum(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0)
    inter_w = np.maximum(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0)
    inter = inter_h * inter_w
    area = np.maximum(box[2] - box[0], 0) * np.maximum(box[3] - box[1], 0)
    areas = np.maximum(boxes[:, 2] - boxes[:, 0], 0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0)
    union = area + areas - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(inter > 0, inter / np.where(inter > 0, union, 1.0), 0.0)


def nms(
    boxes: np.ndarray, scores: np.ndarray, *, iou_threshold: float, max_output: int
) -> np.ndarray:
    """Greedy NMS of one class.

    Args:
        boxes: `(K, 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        scores: `(K,)` scores.
        iou_threshold: drop a box whose IoU with a kept box is above this.
        max_output: keep at most this many.

    Returns:
        Indices of the kept boxes, by decreasing score (ties: lower index first).
    """
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < max_output:
        best = order[0]
        keep.append(int(best))
        rest = order[1:]
        order = rest[_iou_one_to_many(boxes[best], boxes[rest]) <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def multiclass_nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    *,
    iou_threshold: float = IOU_THRESHOLD,
    score_threshold: float = COCO_SCORE_THRESHOLD,
    max_per_class: int = MAX_PER_CLASS,
    max_total: int = MAX_TOTAL,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-class NMS of one image, then the overall best (module docstring).

    Args:
        boxes: `(N, 4)` decoded boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        scores: `(N, C)` per-class scores.
        iou_threshold: NMS IoU threshold.
        score_threshold: candidates score strictly above it.
        max_per_class: kept boxes per class.
        max_total: kept boxes per image.

    Returns:
        `(boxes (K, 4), scores (K,), classes (K,) int32)` sorted by decreasing score,
        `K <= max_total`; boxes not clipped.
    """
    candidates = scores > score_threshold
    best_per_class = np.where(candidates, scores, -np.inf).max(axis=0, initial=-np.inf)
    heap: list[tuple[float, int, int, int]] = []  # (score, -class, -anchor, class): min-heap
    for cls in np.argsort(-best_per_class, kind="stable"):
        if not np.isfinite(best_per_class[cls]):
            break
        floor = heap[0][0] if len(heap) == max_total else -np.inf
        if best_per_class[cls] <= floor:
            break  # every later class scores lower still
        (idx,) = np.nonzero(candidates[:, cls] & (scores[:, cls] > floor))
        kept = idx[
            nms(boxes[idx], scores[idx, cls], iou_threshold=iou_threshold, max_output=max_per_class)
        ]
        for anchor in kept:
            item = (float(scores[anchor, cls]), -int(cls), -int(anchor), int(cls))
            if len(heap) < max_total:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    best = sorted(heap, reverse=True)
    anchors = np.asarray([-item[2] for item in best], dtype=np.int64)
    classes = np.asarray([item[3] for item in best], dtype=np.int32)
    return boxes[anchors].reshape(-1, 4), scores[anchors, classes], classes


def postprocess(
    box_codes: Any,
    class_logits: Any,
    anchors: Any,
    *,
    iou_threshold: float = IOU_THRESHOLD,
    score_threshold: float = COCO_SCORE_THRESHOLD,
    max_per_class: int = MAX_PER_CLASS,
    max_total: int = MAX_TOTAL,
    scales: Sequence[float] = box_coder.DEFAULT_SCALES,
) -> dict[str, np.ndarray]:
    """Detections of a batch, padded to `max_total` per image.

    Args:
        box_codes: `(B, N, 4)` box codes (the model's `"boxes"` output), any array type.
        class_logits: `(B, N, C)` logits (the model's `"classes"` output).
        anchors: `(N, 4)` anchors, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        iou_threshold: NMS IoU threshold (0.6).
        score_threshold: scores must be above it (1e-8).
        max_per_class: kept boxes per class (100).
        max_total: kept boxes per image (100).
        scales: box-coder scales.

    Returns:
        numpy arrays: `"boxes"` float32 `(B, max_total, 4)`, `[ymin, xmin, ymax, xmax]`
        normalized to `[0, 1]` and clipped to it; `"scores"` float32 `(B, max_total)`;
        `"classes"` int32 `(B, max_total)`, class indices in `[0, C)`; `"num_detections"`
        int32 `(B,)`; `"nan_anchors"` int32 `(B,)`, the anchors whose box code or a class
        logit gave NaN (a model's broken outputs: a NaN box is dropped before NMS, a NaN
        score is never a candidate; neither is ever a detection). Entries past
        `num_detections` are 0 (boxes, scores) and -1 (classes).

    Raises:
        ValueError: for inconsistent shapes.
    """
    codes, logits, anchors = _checked_arrays(box_codes, class_logits, anchors)
    batch = codes.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        decoded = box_coder.decode(codes, anchors, scales=scales, xp=np)
    scores, nan_anchors = _finite_candidates(decoded, _sigmoid(logits))
    out = _padded(batch, max_total)
    out["nan_anchors"] = nan_anchors.sum(axis=1, dtype=np.int32)
    for i in range(batch):
        boxes, kept_scores, classes = multiclass_nms(
            decoded[i],
            scores[i],
            iou_threshold=iou_threshold,
            score_threshold=score_threshold,
            max_per_class=max_per_class,
            max_total=max_total,
        )
        k = len(kept_scores)
        out["boxes"][i, :k] = box_ops.clip(boxes, xp=np)
        out["scores"][i, :k] = kept_scores
        out["classes"][i, :k] = classes
        out["num_detections"][i] = k
    return out


def _finite_candidates(decoded: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, ...]:
    """`(scores, nan_anchors)`: the scores `(B, N, C)` with every class of an anchor whose
    decoded box has a NaN set to -inf (never a candidate: clipping keeps NaN, and
    pycocotools scores a NaN IoU as a match), and the mask `(B, N)` of the anchors with a
    NaN box or a NaN class score (a NaN score is never a candidate of its class, as
    `scores > score_threshold` is False). An infinite box code is no NaN: its box is
    clipped to the image."""
    nan_box = np.isnan(decoded).any(axis=-1)
    nan_anchors = nan_box | np.isnan(scores).any(axis=-1)
    return np.where(nan_box[..., None], -np.inf, scores).astype(np.float32), nan_anchors


def warn_nan_anchors(count: int, images: int) -> None:
    """Warns (one `warnings.warn`, one line under the CLI) that `count` anchors of
    `images` images gave NaN outputs (`postprocess`'s `"nan_anchors"`, summed), which were
    no detections; nothing when `count` is 0."""
    if count:
        warnings.warn(
            f"{count} anchor(s) of {images} image(s) gave NaN box or class outputs: "
            "dropped, never detections (the model's outputs are broken)",
            stacklevel=3,
        )


def _checked_arrays(box_codes: Any, class_logits: Any, anchors: Any) -> tuple[np.ndarray, ...]:
    """`postprocess`'s inputs as float32 numpy arrays, their shapes checked."""
    codes = np.asarray(keras.ops.convert_to_numpy(box_codes), dtype=np.float32)
    logits = np.asarray(keras.ops.convert_to_numpy(class_logits), dtype=np.float32)
    anchors = np.asarray(keras.ops.convert_to_numpy(anchors), dtype=np.float32)
    if codes.ndim != 3 or codes.shape[-1] != 4 or logits.shape[:2] != codes.shape[:2]:
        raise ValueError(
            f"need box codes (B, N, 4) and logits (B, N, C); got {codes.shape}, {logits.shape}"
        )
    if anchors.shape != (codes.shape[1], 4):
        raise ValueError(f"anchors must have shape ({codes.shape[1]}, 4); got {anchors.shape}")
    return codes, logits, anchors


def _padded(batch: int, max_total: int) -> dict[str, np.ndarray]:
    """`postprocess`'s result with no detection: boxes and scores 0, classes -1."""
    return {
        "boxes": np.zeros((batch, max_total, 4), np.float32),
        "scores": np.zeros((batch, max_total), np.float32),
        "classes": np.full((batch, max_total), -1, np.int32),
        "num_detections": np.zeros((batch,), np.int32),
    }
