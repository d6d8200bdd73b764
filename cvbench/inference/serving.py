"""The serving functions of exported models, in TensorFlow: uint8 images in, what a client
uses out.

- Classifiers: `(B, H, W, 3)` uint8 RGB images (already resized to the model's input size)
  -> `"probabilities"` float32 `(B, num_classes)` (softmax of the logits),
  `"top_k_indices"` int32 `(B, k)` and `"top_k_scores"` float32 `(B, k)`, best first.
- SSDs: the same images -> the OD API exported detector's outputs, `"detection_boxes"`
  float32 `(B, max_total, 4)` `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` of the input
  and clipped to it, `"detection_scores"` float32 `(B, max_total)`, `"detection_classes"`
  int32 `(B, max_total)` (class indices `[0, num_classes)`, not the OD API's 1-based float
  labels), `"num_detections"` int32 `(B,)`. Entries past `num_detections` are 0 (boxes,
  scores) and -1 (classes). Semantics of `cvbench.detection.postprocess.postprocess`.

NMS, per image (`tf.map_fn`) and per class (one op per class, unrolled):
`tf.image.non_max_suppression_with_scores` (candidates scoring strictly above the threshold;
greedy, a box is dropped when its IoU with a kept one is above the threshold; ties: lower
anchor first), at most `max_per_class`; then `tf.math.top_k` over the classes' results
concatenated in class order (ties: lower class, then lower anchor, first), the `max_total`
best; the kept boxes are clipped. That is `postprocess` exactly, ties included
(tests/inference/test_export_ssd.py). `tf.image.combined_non_max_suppression` was tried
and rejected: it orders equal scores differently (within a class and across classes), so a
cut at `max_per_class` or `max_total` among tied boxes kept other boxes than the numpy path;
it also converts to TFLite only as a Flex (TensorFlow select) op, where
`non_max_suppression_with_scores` is TFLite's built-in `NON_MAX_SUPPRESSION_V5` (whose
kernel, unlike TensorFlow's, may keep other boxes among exactly equal scores).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cvbench.detection import box_coder


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
    """In-graph `postprocess`: decode, sigmoid, per-class NMS, clip, pad (module docstring).

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

    anchors = tf.constant(anchors, tf.float32)
    boxes = box_coder.decode(box_codes, anchors, scales=scales, xp=tf)
    scores = _sigmoid(class_logits)
    num_classes = class_logits.shape[-1]

    def one_image(args):
        image_boxes, image_scores = args
        kept_scores, kept_anchors, kept_classes = [], [], []
        for c in range(num_classes):  # unrolled: one NMS op per class
            index, score = tf.image.non_max_suppression_with_scores(
                image_boxes,
                image_scores[:, c],
                max_output_size=max_per_class,
                iou_threshold=iou_threshold,
                score_threshold=score_threshold,
            )
            kept_scores.append(score)
            kept_anchors.append(index)
            kept_classes.append(tf.fill(tf.shape(index), c))
        kept_scores = tf.concat(kept_scores, 0)
        kept_anchors = tf.concat(kept_anchors, 0)
        kept_classes = tf.concat(kept_classes, 0)
        # top_k puts equal values in input order: class, then the NMS order (lower anchor).
        count = tf.minimum(tf.size(kept_scores), max_total)
        best_scores, best = tf.math.top_k(kept_scores, k=count, sorted=True)
        pad = max_total - count
        best_boxes = tf.clip_by_value(tf.gather(image_boxes, tf.gather(kept_anchors, best)), 0, 1)
        return (
            tf.pad(best_boxes, [[0, pad], [0, 0]]),
            tf.pad(best_scores, [[0, pad]]),
            tf.pad(tf.gather(kept_classes, best), [[0, pad]], constant_values=-1),
            count,
        )

    out_boxes, out_scores, out_classes, counts = tf.map_fn(
        one_image,
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
