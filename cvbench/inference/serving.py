"""The serving functions of exported models, in TensorFlow: uint8 images in, what a client
uses out.

Inputs: `(B, H, W, 3)` uint8 RGB images of any size (one size per batch), brought to the
model's input in the graph by the model file's `ModelInfo.resize` rule, with the evaluation
pipeline's own TensorFlow code (`model_input_function`): "stretch" is the COCO pipeline's
`tf.image.resize`; "center_crop" and "crop_then_resize" are
`cvbench.data.read.preprocessing.eval_view` (then `quantize` for `ModelInfo.quantize_uint8`);
both interpolate by `ModelInfo.interpolation`. An image already of the model's size passes
"stretch" unchanged.

- Classifiers -> `"probabilities"` float32 `(B, num_classes)` (softmax of the logits),
  `"top_k_indices"` int32 `(B, k)`, `"top_k_scores"` float32 `(B, k)`, best first, and
  `"top_k_class_names"` string `(B, k)` (the model file's class names).
- SSDs -> the OD API exported detector's outputs, `"detection_boxes"` float32
  `(B, max_total, 4)` `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` of the input image
  (of the original image too: "stretch" scales each axis) and clipped to it,
  `"detection_scores"` float32 `(B, max_total)`, `"detection_classes"` int32
  `(B, max_total)` (class indices `[0, num_classes)`, not the OD API's 1-based float
  labels), `"detection_class_names"` string `(B, max_total)`, `"num_detections"` int32
  `(B,)`. Entries past `num_detections` are 0 (boxes, scores), -1 (classes) and "" (names).
  Semantics of `cvbench.detection.postprocess.postprocess`.

NMS, per image (`tf.map_fn`) and per class (one op per class, unrolled): `NonMaxSuppressionV5`
(`tf.image.non_max_suppression_with_scores`'s op, padded to `max_per_class` and masked by its
valid count: static shapes, so TFLite, whose kernel always returns `max_per_class` entries,
counts no padding as a detection; candidates scoring strictly above the threshold; greedy, a
box is dropped when its IoU with a kept one is above the threshold; ties: lower anchor first),
at most `max_per_class`; then `tf.math.top_k` over the classes' results concatenated in class
order (ties: lower class, then lower anchor, first), the `max_total` best; the kept boxes are
clipped. That is `postprocess` exactly, ties included (tests/inference/test_export_ssd.py),
and so is its rule for broken outputs (`_finite_candidates`): an anchor whose decoded box has a
NaN, or a class whose score is NaN, is never a candidate, so no NaN box is ever a detection.
`tf.image.combined_non_max_suppression` was tried and rejected: it orders equal scores
differently (within a class and across classes), so a cut at `max_per_class` or `max_total`
among tied boxes kept other boxes than the numpy path; it also converts to TFLite only as a
Flex (TensorFlow select) op, where `non_max_suppression_with_scores` is TFLite's built-in
`NON_MAX_SUPPRESSION_V5` (whose kernel, unlike TensorFlow's, may keep other boxes among
exactly equal scores)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cvbench.detection import box_coder
from cvbench.utils.model_file import ModelInfo, NmsSettings


def model_input_function(info: ModelInfo) -> Callable[[Any], Any]:
    """`images -> model input`: uint8 `(B, H, W, 3)` -> float32 `(B, h, w, 3)` in `[0, 255]`,
    `(h, w) = info.image_size`, by `info.resize` (module docstring).

    Raises:
        ValueError: for a "center_crop" or "crop_then_resize" input that is not square (the
            evaluation pipeline's crops are square).
    """
    import tensorflow as tf

    from cvbench.data.read.model_inputs import eval_preprocessing
    from cvbench.data.read.preprocessing import eval_view, quantize, resize

    height, width = info.image_size
    if info.resize == "stretch":
        # float32 first (the COCO pipeline's resize of uint8 computes the same in float32):
        # TFLite's resize keeps the input's dtype
        return lambda images: resize(
            tf.cast(images, tf.float32), [height, width], info.interpolation
        )
    if height != width:
        raise ValueError(f"{info.resize} needs a square input size; got {info.image_size}")

    p = eval_preprocessing(info)

    def to_input(images):
        # batched (one crop window per batch: its images share a size), no per-image loop
        view = eval_view(images, image_size=height, preprocessing=p)
        return tf.cast(quantize(view, p), tf.float32)

    return to_input


def class_name_tensor(indices: Any, class_names: Sequence[str]) -> Any:
    """`class_names[i]` for each index of `indices` (int), "" for -1 (no detection)."""
    import tensorflow as tf

    table = tf.constant([*class_names, ""])
    return tf.gather(table, tf.where(indices < 0, len(class_names), indices))


def _sigmoid(x: Any) -> Any:
    import tensorflow as tf

    return 0.5 * (1.0 + tf.tanh(0.5 * x))  # the numpy path's formula


def detections(
    box_codes: Any,
    class_logits: Any,
    anchors: Any,
    *,
    iou_threshold: float,
    score_threshold: float,
    max_per_class: int,
    max_total: int,
    scales: Sequence[float] = box_coder.DEFAULT_SCALES,
) -> dict[str, Any]:
    """In-graph `postprocess`: decode, sigmoid, drop NaN boxes and scores
    (`_finite_candidates`), per-class NMS, clip, pad (module docstring).

    Args:
        box_codes: `(B, N, 4)` float32 box codes.
        class_logits: `(B, N, C)` float32 class logits.
        anchors: `(N, 4)` anchors, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        iou_threshold: NMS IoU threshold.
        score_threshold: scores must be above it.
        max_per_class: kept boxes per class.
        max_total: kept boxes per image.
        scales: box-coder scales.

    Returns:
        TF tensors `"detection_boxes"`, `"detection_scores"`, `"detection_classes"`,
        `"num_detections"` (module docstring).
    """
    import tensorflow as tf

    nms = NmsSettings(
        iou_threshold=iou_threshold,
        score_threshold=score_threshold,
        max_per_class=max_per_class,
        max_total=max_total,
    )
    anchors = tf.constant(anchors, tf.float32)
    boxes = box_coder.decode(box_codes, anchors, scales=scales, xp=tf)
    num_classes = class_logits.shape[-1]
    boxes, scores = _finite_candidates(boxes, _sigmoid(class_logits))
    out_boxes, out_scores, out_classes, counts = tf.map_fn(
        lambda args: _image_detections(*args, nms=nms, num_classes=num_classes),
        (boxes, scores),
        fn_output_signature=(
            tf.TensorSpec((max_total, 4), tf.float32),
            tf.TensorSpec((max_total,), tf.float32),
            tf.TensorSpec((max_total,), tf.int32),
            tf.TensorSpec((), tf.int32),
        ),
    )
    return {
        "detection_boxes": out_boxes,
        "detection_scores": out_scores,
        "detection_classes": out_classes,
        "num_detections": counts,
    }


def _finite_candidates(boxes: Any, scores: Any) -> tuple[Any, Any]:
    """`postprocess`'s NaN rule in the graph (`cvbench.detection.postprocess`'s
    `_finite_candidates`): every class of an anchor whose decoded box `(B, N, 4)` has a NaN
    scores -inf, never an NMS candidate (TensorFlow's and TFLite's NMS passed a NaN box on
    as a detection: its IoU with any box is no overlap), and so does a NaN score `(B, N, C)`
    (never above the threshold in numpy either); the NaN boxes are zeroed, so that no NaN
    reaches the NMS kernels at all. An infinite box code is no NaN: its box is clipped."""
    import tensorflow as tf

    nan_box = tf.reduce_any(tf.math.is_nan(boxes), axis=-1, keepdims=True)
    never = tf.constant(-float("inf"), scores.dtype)
    scores = tf.where(nan_box | tf.math.is_nan(scores), never, scores)
    return tf.where(nan_box, tf.zeros_like(boxes), boxes), scores


def _class_candidates(boxes: Any, scores: Any, *, nms: NmsSettings, num_classes: int):
    """Each class's NMS of one image, concatenated in class order: `(scores, anchors,
    classes)` of `num_classes * max_per_class` entries (padding scores -1) and the count of
    valid ones.

    Static shapes throughout: each class's NMS is padded to `max_per_class` and its valid
    count masks the padding. TFLite's NON_MAX_SUPPRESSION_V5 always returns `max_output_size`
    entries (padding with index 0, score 0): a result sized by the dynamic shape of
    TensorFlow's unpadded op counted every padding entry as a detection of class 0 there (100
    detections on an image without any)."""
    import tensorflow as tf

    per_class = nms.max_per_class
    kept_scores, kept_anchors, kept_classes = [], [], []
    found = tf.constant(0, tf.int32)
    for c in range(num_classes):  # unrolled: one NMS op per class
        index, score, valid = tf.raw_ops.NonMaxSuppressionV5(
            boxes=boxes,
            scores=scores[:, c],
            max_output_size=per_class,
            iou_threshold=nms.iou_threshold,
            score_threshold=nms.score_threshold,
            soft_nms_sigma=0.0,
            pad_to_max_output_size=True,
        )
        # padding scores -1: below every kept score (those are above the threshold >= 0)
        kept_scores.append(tf.where(tf.range(per_class) < valid, score, -1.0))
        kept_anchors.append(index)
        kept_classes.append(tf.fill([per_class], c))
        found += tf.cast(valid, tf.int32)
    return tf.concat(kept_scores, 0), tf.concat(kept_anchors, 0), tf.concat(kept_classes, 0), found


def _image_detections(boxes: Any, scores: Any, *, nms: NmsSettings, num_classes: int):
    """One image's detections, padded to `max_total`: the best over the classes' NMS
    results (`_class_candidates`), clipped."""
    import tensorflow as tf

    kept_scores, kept_anchors, kept_classes, found = _class_candidates(
        boxes, scores, nms=nms, num_classes=num_classes
    )
    max_total = nms.max_total
    k = min(max_total, num_classes * nms.max_per_class)
    # top_k puts equal values in input order: class, then the NMS order (lower anchor).
    count = tf.minimum(found, max_total)
    best_scores, best = tf.math.top_k(kept_scores, k=k, sorted=True)
    valid = tf.range(k) < count
    best_boxes = tf.clip_by_value(tf.gather(boxes, tf.gather(kept_anchors, best)), 0, 1)
    pad = max_total - k
    return (
        tf.pad(tf.where(valid[:, None], best_boxes, 0.0), [[0, pad], [0, 0]]),
        tf.pad(tf.where(valid, best_scores, 0.0), [[0, pad]]),
        tf.pad(tf.where(valid, tf.gather(kept_classes, best), -1), [[0, pad]], constant_values=-1),
        count,
    )


def classifier_outputs(logits: Any, *, top_k: int, probabilities: bool = False) -> dict[str, Any]:
    """Probabilities and top-k of classifier outputs.

    Args:
        logits: `(B, num_classes)` logits (or probabilities, with `probabilities=True`).
        top_k: how many classes to return, at most `num_classes`.
        probabilities: the model already ends in a softmax.

    Returns:
        TF tensors `"probabilities"`, `"top_k_indices"` (int32), `"top_k_scores"`.
    """
    import tensorflow as tf

    probs = tf.cast(logits, tf.float32)
    if not probabilities:
        probs = tf.nn.softmax(probs, axis=-1)
    scores, indices = tf.math.top_k(probs, k=top_k, sorted=True)
    return {"probabilities": probs, "top_k_indices": indices, "top_k_scores": scores}
