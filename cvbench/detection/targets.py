"""Per-anchor training targets: matcher + box coder, for the losses of `losses.py`.

Input per image: up to `M` ground-truth boxes `(M, 4)`, `[ymin, xmin, ymax, xmax]`
normalized to `[0, 1]`, and integer labels `(M,)`, class indices in `[0, num_classes)`.
Pad to a fixed `M` (100 in SSD320) with **label -1**; rows with a negative label, a label
`>= num_classes` or a box of zero area after clipping to the image are ignored (so padding
rows of all-zero boxes are ignored whatever their label). Boxes reaching outside the image
are clipped to it first; a box entirely outside becomes degenerate and is ignored.

Output per image (`y_true`, the same keys as the model's outputs so that Keras pairs them
with `model.compile(loss={"boxes": SSDBoxLoss(), "classes": SSDClassLoss()})`):

- `"boxes"`: float32 `(N, 5)`: `[..., :4]` the box codes `[ty, tx, th, tw]` of the matched
  ground truth (`box_coder.encode`, scales 10/10/5/5), zeros for other anchors;
  `[..., 4]` the positive mask, 1.0 for matched anchors, else 0.0.
- `"classes"`: float32 `(N, num_classes + 1)`: `[..., :num_classes]` one-hot class of the
  matched ground truth, all zeros for background (unmatched) anchors; `[..., num_classes]`
  the classification weight, 1.0 for matched and unmatched anchors, 0.0 for `IGNORED` ones.

`N` is the number of anchors (`anchors.multiscale_anchors`), in the head's output order.
Batched by tf.data these become `(B, N, 5)` and `(B, N, num_classes + 1)`.

Two entry points: `encode_targets` (any array namespace, `keras.ops` by default) and
`TargetEncoder`, a callable for `tf.data.Dataset.map` built on plain TensorFlow so that it
runs in the input pipeline whatever the Keras backend. TensorFlow is imported only when a
TensorFlow function here is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import keras
import numpy as np

from cvbench.detection import box_coder, box_ops, matcher

Array = Any

#: Label of a padding row.
PADDING_LABEL = -1


def encode_targets(
    anchors: Array,
    boxes: Array,
    labels: Array,
    *,
    num_classes: int,
    matched_threshold: float = 0.5,
    unmatched_threshold: float = 0.5,
    scales: Sequence[float] = box_coder.DEFAULT_SCALES,
    xp: Any = keras.ops,
) -> dict[str, Array]:
    """Targets of one image (see the module docstring for the formats).

    Args:
        anchors: `(N, 4)` anchors, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        boxes: `(M, 4)` ground truth, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`,
            padded rows allowed; `M` may be 0.
        labels: `(M,)` integer class indices in `[0, num_classes)`, -1 for padding.
        num_classes: number of classes (background excluded).
        matched_threshold: IoU of a match (`matcher.argmax_match`).
        unmatched_threshold: IoU below which an anchor is background.
        scales: box-coder scales `(sy, sx, sh, sw)`.
        xp: array namespace: `keras.ops` (default), or `tf_array_namespace()` inside tf.data.

    Returns:
        `{"boxes": (N, 5) float32, "classes": (N, num_classes + 1) float32}`.

    Raises:
        ValueError: if `num_classes < 1` or the thresholds are inconsistent.
    """
    if isinstance(num_classes, bool) or not (isinstance(num_classes, int) and num_classes >= 1):
        raise ValueError(f"num_classes must be an int >= 1; got {num_classes!r}")
    anchors = xp.cast(anchors, "float32")
    boxes = box_ops.clip(xp.cast(boxes, "float32"), xp=xp)
    labels = xp.cast(labels, "int32")
    # One always-invalid row, so that M >= 1 and the gathers below are defined.
    boxes = xp.concatenate([boxes, xp.zeros_like(anchors[:1])], axis=0)
    padding_label = xp.cast(xp.full_like(anchors[:1, 0], PADDING_LABEL), "int32")
    labels = xp.concatenate([labels, padding_label], axis=0)
    valid = xp.logical_and(
        box_ops.is_valid(boxes, xp=xp), xp.logical_and(labels >= 0, labels < num_classes)
    )
    matches = matcher.match_boxes(
        boxes,
        anchors,
        valid,
        matched_threshold=matched_threshold,
        unmatched_threshold=unmatched_threshold,
        xp=xp,
    )
    positive = matches >= 0
    row = xp.maximum(matches, 0)
    codes = box_coder.encode(xp.take(boxes, row, axis=0), anchors, scales=scales, xp=xp)
    codes = xp.where(positive[:, None], codes, 0.0)
    one_hot = xp.one_hot(xp.take(labels, row, axis=0), num_classes)
    one_hot = xp.where(positive[:, None], one_hot, 0.0)
    positive = xp.cast(positive, "float32")[:, None]
    class_weight = xp.cast(xp.not_equal(matches, matcher.IGNORED), "float32")[:, None]
    return {
        "boxes": xp.concatenate([codes, positive], axis=-1),
        "classes": xp.concatenate([one_hot, class_weight], axis=-1),
    }


def tf_array_namespace() -> SimpleNamespace:
    """The array namespace of this package on plain TensorFlow (for tf.data pipelines).

    Returns:
        An object with the numpy-style functions that `box_ops`, `box_coder`, `matcher` and
        `encode_targets` call, implemented with `tf` ops.
    """
    import tensorflow as tf

    def where(condition, x, y):
        x = tf.convert_to_tensor(x)
        return tf.where(condition, x, tf.cast(y, x.dtype))

    return SimpleNamespace(
        maximum=lambda x, y: tf.maximum(x, tf.cast(y, tf.convert_to_tensor(x).dtype)),
        minimum=tf.minimum,
        clip=lambda x, lo, hi: tf.clip_by_value(x, lo, hi),
        where=where,
        stack=lambda xs, axis=0: tf.stack(xs, axis=axis),
        concatenate=lambda xs, axis=0: tf.concat(xs, axis=axis),
        logical_and=tf.logical_and,
        not_equal=tf.not_equal,
        log=tf.math.log,
        exp=tf.exp,
        cast=tf.cast,
        argmax=lambda x, axis: tf.argmax(x, axis=axis, output_type=tf.int32),
        max=lambda x, axis: tf.reduce_max(x, axis=axis),
        ones_like=tf.ones_like,
        zeros_like=tf.zeros_like,
        full_like=lambda x, value: tf.fill(tf.shape(x), tf.cast(value, x.dtype)),
        one_hot=lambda x, n: tf.one_hot(x, n, dtype=tf.float32),
        take=lambda x, indices, axis=None: tf.gather(x, indices, axis=axis),
    )


class TargetEncoder:
    """Encodes ground truth into `y_true` inside `tf.data` (plain TensorFlow ops).

    Map it over unbatched examples (`(M, 4)` boxes, `(M,)` labels) or batched ones
    (`(B, M, 4)`, `(B, M)`); the output has the matching rank (see the module docstring).

    Args:
        anchors: `(N, 4)` anchors, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        num_classes: number of classes (background excluded).
        matched_threshold: IoU of a match.
        unmatched_threshold: IoU below which an anchor is background.
        scales: box-coder scales `(sy, sx, sh, sw)`.

    Example:
        >>> from cvbench.detection import multiscale_anchors
        >>> encoder = TargetEncoder(multiscale_anchors(128), num_classes=3)
        >>> y = encoder(np.array([[0.1, 0.1, 0.6, 0.5]]), np.array([2]))
        >>> tuple(y["boxes"].shape), tuple(y["classes"].shape)
        ((2046, 5), (2046, 4))
    """

    def __init__(
        self,
        anchors: Array,
        num_classes: int,
        *,
        matched_threshold: float = 0.5,
        unmatched_threshold: float = 0.5,
        scales: Sequence[float] = box_coder.DEFAULT_SCALES,
    ) -> None:
        anchors = np.asarray(anchors, dtype=np.float32)
        if anchors.ndim != 2 or anchors.shape[1] != 4:
            raise ValueError(f"anchors must have shape (N, 4); got {anchors.shape}")
        if isinstance(num_classes, bool) or not (isinstance(num_classes, int) and num_classes >= 1):
            raise ValueError(f"num_classes must be an int >= 1; got {num_classes!r}")
        if unmatched_threshold > matched_threshold:
            raise ValueError(
                f"unmatched_threshold ({unmatched_threshold!r}) must not exceed "
                f"matched_threshold ({matched_threshold!r})"
            )
        self.anchors = anchors
        self.num_classes = num_classes
        self.matched_threshold = float(matched_threshold)
        self.unmatched_threshold = float(unmatched_threshold)
        self.scales = tuple(float(s) for s in scales)

    def _encode_one(self, boxes: Any, labels: Any) -> dict[str, Any]:
        return encode_targets(
            self.anchors,
            boxes,
            labels,
            num_classes=self.num_classes,
            matched_threshold=self.matched_threshold,
            unmatched_threshold=self.unmatched_threshold,
            scales=self.scales,
            xp=tf_array_namespace(),
        )

    def __call__(self, boxes: Array, labels: Array) -> dict[str, Any]:
        """Returns `{"boxes": (..., N, 5), "classes": (..., N, num_classes + 1)}` tf.Tensors.

        Args:
            boxes: `(M, 4)` or `(B, M, 4)` ground truth, `[ymin, xmin, ymax, xmax]`
                normalized to `[0, 1]`, padded with label -1 rows.
            labels: `(M,)` or `(B, M)` class indices in `[0, num_classes)`, -1 for padding.

        Raises:
            ValueError: if the ranks of `boxes` and `labels` do not fit.
        """
        import tensorflow as tf

        boxes = tf.cast(tf.convert_to_tensor(boxes), tf.float32)
        labels = tf.cast(tf.convert_to_tensor(labels), tf.int32)
        if boxes.shape.rank == 2 and labels.shape.rank == 1:
            return self._encode_one(boxes, labels)
        if boxes.shape.rank == 3 and labels.shape.rank == 2:
            n = self.anchors.shape[0]
            spec = {
                "boxes": tf.TensorSpec((n, 5), tf.float32),
                "classes": tf.TensorSpec((n, self.num_classes + 1), tf.float32),
            }
            return tf.map_fn(
                lambda args: self._encode_one(*args), (boxes, labels), fn_output_signature=spec
            )
        raise ValueError(
            f"boxes/labels must have shapes (M, 4)/(M,) or (B, M, 4)/(B, M); got "
            f"{tuple(boxes.shape)}/{tuple(labels.shape)}"
        )
