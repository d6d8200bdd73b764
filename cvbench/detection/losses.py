"""SSD losses: sigmoid focal (classes) + smooth L1 (boxes), normalized by the matched anchors.

SSD320 v1.2 (TF OD API config): focal alpha 0.25, gamma 2.0; smooth L1 delta 1.0; weights
1 and 1; both sums divided by `max(1, number of matched anchors in the batch)`, and the box
loss also by the code size 4 (`normalize_loc_loss_by_codesize`).

`y_true` is the structure of `targets.py`: `{"boxes": (B, N, 5), "classes": (B, N, C + 1)}`
(codes + positive mask; one-hot + classification weight). `y_pred` is the model's output:
`{"boxes": (B, N, 4) box codes, "classes": (B, N, C) logits}`.

- With `model.compile`/`fit`: `loss={"boxes": SSDBoxLoss(), "classes": SSDClassLoss()}`
  (Keras hands each loss the matching entries of `y_true` and `y_pred`).
- In a custom loop: `SSDLoss()(y_true, y_pred)`, the sum of the two.

Every loss returns per-image values already divided by the batch-wide normalizer and uses the
`"sum"` reduction, so the reduced value is exactly the OD API's (not a mean over images).

Non-finite inputs: anchors with weight 0 (negatives for the box loss, ignored anchors for the
class loss) contribute exactly 0 whatever their prediction, inf and NaN included. Elsewhere
a logit of +-inf gives 0 when it agrees with its 0/1 target and +inf when it contradicts it;
NaN predictions give NaN (a NaN in the model is a bug to surface, not to mask).

All functions use `keras.ops` only (any backend) and compute in float32.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

Array = Any


def _float32(x: Array) -> Array:
    return ops.cast(x, "float32")


def sigmoid_focal_loss(
    targets: Array, logits: Array, *, alpha: float = 0.25, gamma: float = 2.0
) -> Array:
    """Element-wise sigmoid focal loss on logits (Lin et al. 2017).

    `loss = a_t * (1 - p_t)**gamma * BCE(targets, sigmoid(logits))`, with
    `a_t = alpha * t + (1 - alpha) * (1 - t)` and
    `1 - p_t = t * sigmoid(-x) + (1 - t) * sigmoid(x)`.
    The cross entropy is `t * softplus(-x) + (1 - t) * softplus(x)` with each term dropped where
    its factor is 0, which keeps it exact for large logits and finite for agreeing infinities.

    Args:
        targets: targets in `[0, 1]` (one-hot), any shape.
        logits: logits, the shape of `targets`.
        alpha: weight of the positive class.
        gamma: focusing exponent (>= 0).

    Returns:
        Float32 losses, the shape of `targets`.
    """
    t = _float32(targets)
    x = _float32(logits)
    zero = ops.zeros_like(x)
    cross_entropy = ops.where(t > 0, t * ops.softplus(-x), zero) + ops.where(
        t < 1, (1.0 - t) * ops.softplus(x), zero
    )
    one_minus_pt = t * ops.sigmoid(-x) + (1.0 - t) * ops.sigmoid(x)
    alpha_t = alpha * t + (1.0 - alpha) * (1.0 - t)
    return alpha_t * ops.power(one_minus_pt, gamma) * cross_entropy


def smooth_l1_loss(targets: Array, predictions: Array, *, delta: float = 1.0) -> Array:
    """Element-wise smooth L1 (Huber) loss.

    `0.5 * d**2` where `|d| <= delta`, else `delta * (|d| - 0.5 * delta)`, `d = pred - target`.

    Args:
        targets: any shape.
        predictions: the shape of `targets`.
        delta: where the quadratic part turns linear.

    Returns:
        Float32 losses, the shape of `targets`.
    """
    d = ops.abs(_float32(predictions) - _float32(targets))
    quadratic = ops.minimum(d, delta)
    return 0.5 * quadratic * quadratic + delta * (d - quadratic)


def num_positives(y_true_boxes: Array) -> Array:
    """Matched anchors in the batch, `max(1, sum of the positive mask)`: the loss normalizer.

    Args:
        y_true_boxes: `(B, N, 5)` box targets of `targets.py` (mask in the last column).

    Returns:
        Float32 scalar >= 1.
    """
    return ops.maximum(ops.sum(_float32(y_true_boxes)[..., 4]), 1.0)


def box_loss(
    y_true_boxes: Array, box_codes: Array, *, delta: float = 1.0, code_size_normalize: bool = True
) -> Array:
    """Per-image smooth L1 box loss, normalized by the batch's matched anchors (and by 4).

    Args:
        y_true_boxes: `(B, N, 5)` codes + positive mask (`targets.py`).
        box_codes: `(B, N, 4)` predicted box codes.
        delta: smooth L1 delta.
        code_size_normalize: also divide by the code size 4.

    Returns:
        `(B,)` float32 losses; their sum is the batch loss.
    """
    y_true_boxes = _float32(y_true_boxes)
    positive = y_true_boxes[..., 4:5] > 0
    per_coord = smooth_l1_loss(y_true_boxes[..., :4], box_codes, delta=delta)
    per_coord = ops.where(positive, per_coord, ops.zeros_like(per_coord))
    normalizer = num_positives(y_true_boxes) * (4.0 if code_size_normalize else 1.0)
    return ops.sum(per_coord, axis=(1, 2)) / normalizer


def class_loss(
    y_true_classes: Array, class_logits: Array, *, alpha: float = 0.25, gamma: float = 2.0
) -> Array:
    """Per-image focal class loss, normalized by the batch's matched anchors.

    The matched anchors are counted from the targets: rows with a 1 in the one-hot part and a
    positive weight (the same count as the box targets' positive mask).

    Args:
        y_true_classes: `(B, N, C + 1)` one-hot + classification weight (`targets.py`).
        class_logits: `(B, N, C)` logits.
        alpha: focal alpha.
        gamma: focal gamma.

    Returns:
        `(B,)` float32 losses; their sum is the batch loss.
    """
    y_true_classes = _float32(y_true_classes)
    one_hot = y_true_classes[..., :-1]
    weight = y_true_classes[..., -1:] > 0
    per_entry = sigmoid_focal_loss(one_hot, class_logits, alpha=alpha, gamma=gamma)
    per_entry = ops.where(weight, per_entry, ops.zeros_like(per_entry))
    matched = ops.logical_and(ops.max(one_hot, axis=-1) > 0, weight[..., 0])
    normalizer = ops.maximum(ops.sum(_float32(matched)), 1.0)
    return ops.sum(per_entry, axis=(1, 2)) / normalizer


@keras.saving.register_keras_serializable(package="cvbench")
class SSDBoxLoss(keras.losses.Loss):
    """Keras loss for the `"boxes"` output: smooth L1 / max(1, matched) / 4.

    Args:
        delta: smooth L1 delta (1.0).
        code_size_normalize: also divide by the code size 4.
        name: loss name.

    Example:
        >>> import numpy as np
        >>> y_true = np.zeros((1, 2, 5), "float32")
        >>> y_true[0, 0] = [1.0, 0.0, 0.0, 0.0, 1.0]  # one matched anchor, code ty = 1
        >>> float(SSDBoxLoss()(y_true, np.zeros((1, 2, 4), "float32")))  # 0.5 * 1**2 / 1 / 4
        0.125
    """

    def __init__(
        self, delta: float = 1.0, code_size_normalize: bool = True, name: str = "ssd_box_loss"
    ) -> None:
        super().__init__(name=name, reduction="sum")
        self.delta = float(delta)
        self.code_size_normalize = bool(code_size_normalize)

    def call(self, y_true: Array, y_pred: Array) -> Array:
        return box_loss(
            y_true, y_pred, delta=self.delta, code_size_normalize=self.code_size_normalize
        )

    def get_config(self) -> dict[str, Any]:
        return {
            "delta": self.delta,
            "code_size_normalize": self.code_size_normalize,
            "name": self.name,
        }


@keras.saving.register_keras_serializable(package="cvbench")
class SSDClassLoss(keras.losses.Loss):
    """Keras loss for the `"classes"` output: sigmoid focal / max(1, matched).

    Args:
        alpha: focal alpha (0.25).
        gamma: focal gamma (2.0).
        name: loss name.
    """

    def __init__(
        self, alpha: float = 0.25, gamma: float = 2.0, name: str = "ssd_class_loss"
    ) -> None:
        super().__init__(name=name, reduction="sum")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1]; got {alpha!r}")
        if gamma < 0:
            raise ValueError(f"gamma must be >= 0; got {gamma!r}")
        self.alpha = float(alpha)
        self.gamma = float(gamma)

    def call(self, y_true: Array, y_pred: Array) -> Array:
        return class_loss(y_true, y_pred, alpha=self.alpha, gamma=self.gamma)

    def get_config(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "gamma": self.gamma, "name": self.name}


@keras.saving.register_keras_serializable(package="cvbench")
class SSDLoss(keras.losses.Loss):
    """The whole SSD loss on the nested structures: `box_weight * box + class_weight * class`.

    `y_true`/`y_pred` are dicts with keys `"boxes"` and `"classes"` (module docstring); a
    `(boxes, classes)` tuple is accepted too. For `model.compile` use the two per-output losses
    instead (Keras applies a single loss to each output separately).

    Args:
        alpha: focal alpha.
        gamma: focal gamma.
        delta: smooth L1 delta.
        box_weight: weight of the box loss (1.0).
        class_weight: weight of the class loss (1.0).
        code_size_normalize: divide the box loss by the code size 4.
        name: loss name.
    """

    def __init__(
        self,
        alpha: float = 0.25,
        gamma: float = 2.0,
        delta: float = 1.0,
        box_weight: float = 1.0,
        class_weight: float = 1.0,
        code_size_normalize: bool = True,
        name: str = "ssd_loss",
    ) -> None:
        super().__init__(name=name, reduction="sum")
        self.box = SSDBoxLoss(delta=delta, code_size_normalize=code_size_normalize)
        self.cls = SSDClassLoss(alpha=alpha, gamma=gamma)
        self.box_weight = float(box_weight)
        self.class_weight = float(class_weight)

    @staticmethod
    def _split(structure: Any) -> tuple[Array, Array]:
        if isinstance(structure, dict):
            return structure["boxes"], structure["classes"]
        boxes, classes = structure
        return boxes, classes

    def call(self, y_true: Any, y_pred: Any) -> Array:
        true_boxes, true_classes = self._split(y_true)
        pred_boxes, pred_classes = self._split(y_pred)
        return self.box_weight * self.box.call(
            true_boxes, pred_boxes
        ) + self.class_weight * self.cls.call(true_classes, pred_classes)

    def get_config(self) -> dict[str, Any]:
        return {
            "alpha": self.cls.alpha,
            "gamma": self.cls.gamma,
            "delta": self.box.delta,
            "box_weight": self.box_weight,
            "class_weight": self.class_weight,
            "code_size_normalize": self.box.code_size_normalize,
            "name": self.name,
        }
