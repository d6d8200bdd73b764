"""Box format, area, IoU, clipping and the conversions at the data and evaluation edges.

**The internal box format** of `cvbench.detection` is `[ymin, xmin, ymax, xmax]`, normalized by
the image height (y) and width (x), so that the image spans `[0, 1]` on both axes (the TF
Object Detection API convention). Every function of this package that takes or returns boxes
uses it unless its docstring names another format. Anchors may reach outside `[0, 1]`; ground
truth is clipped into it by the target encoder.

The only other format is COCO's `[x, y, width, height]` in pixels (annotations in, detections
out): `coco_to_boxes` and `boxes_to_coco` convert at those edges, and `boxes_to_pixels`
scales to pixel corners for display.

Array namespaces: the functions here use the numpy-like operations of an array namespace `xp`
passed as a keyword: `keras.ops` (the default; backend-agnostic, for models and losses),
`numpy` (for the conversions, at the data and evaluation edges) or
`cvbench.detection.targets.tf_array_namespace()` (plain TensorFlow, inside tf.data whatever the
Keras backend). Arrays combined in one call must share a dtype. A namespace needs `maximum`,
`minimum`, `clip`, `where`, `stack` and `logical_and`.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

#: Human-readable name of the internal format, repeated in docstrings.
BOX_FORMAT = "[ymin, xmin, ymax, xmax] normalized to [0, 1]"

Array = Any  # a numpy array, a backend tensor or a tf.Tensor, depending on `xp`


def _unstack(boxes: Array) -> tuple[Array, Array, Array, Array]:
    return boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]


def area(boxes: Array, *, xp: Any = keras.ops) -> Array:
    """Areas of boxes; degenerate (inverted) boxes have area 0.

    Args:
        boxes: `(..., 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` (or any
            consistent unit: the area is in that unit squared).
        xp: array namespace (see the module docstring).

    Returns:
        `(...)` areas, the dtype of `boxes`.
    """
    ymin, xmin, ymax, xmax = _unstack(boxes)
    return xp.maximum(ymax - ymin, 0.0) * xp.maximum(xmax - xmin, 0.0)


def intersection(boxes1: Array, boxes2: Array, *, xp: Any = keras.ops) -> Array:
    """Pairwise intersection areas.

    Args:
        boxes1: `(..., M, 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        boxes2: `(N, 4)` boxes, same format.
        xp: array namespace (see the module docstring).

    Returns:
        `(..., M, N)` intersection areas (0 for disjoint boxes).
    """
    ymin1, xmin1, ymax1, xmax1 = _unstack(boxes1[..., :, None, :])
    ymin2, xmin2, ymax2, xmax2 = _unstack(boxes2)
    height = xp.maximum(xp.minimum(ymax1, ymax2) - xp.maximum(ymin1, ymin2), 0.0)
    width = xp.maximum(xp.minimum(xmax1, xmax2) - xp.maximum(xmin1, xmin2), 0.0)
    return height * width


def iou(boxes1: Array, boxes2: Array, *, xp: Any = keras.ops) -> Array:
    """Pairwise intersection over union.

    The IoU is defined as 0 wherever the intersection is 0, so degenerate boxes (zero area)
    have IoU 0 with everything, themselves included, and never produce NaN.

    Args:
        boxes1: `(..., M, 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        boxes2: `(N, 4)` boxes, same format.
        xp: array namespace (see the module docstring).

    Returns:
        `(..., M, N)` IoU values in `[0, 1]`.
    """
    inter = intersection(boxes1, boxes2, xp=xp)
    union = area(boxes1, xp=xp)[..., :, None] + area(boxes2, xp=xp) - inter
    positive = inter > 0.0
    # The division is masked twice: `where` alone would still differentiate 0/0.
    return xp.where(positive, inter / xp.where(positive, union, 1.0), 0.0)


def clip(boxes: Array, *, xp: Any = keras.ops) -> Array:
    """Clips boxes to the image, `[0, 1]` on both axes.

    Args:
        boxes: `(..., 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        xp: array namespace (see the module docstring).

    Returns:
        `(..., 4)` boxes in the same format with every coordinate in `[0, 1]`. A box entirely
        outside the image becomes degenerate (zero area).
    """
    return xp.clip(boxes, 0.0, 1.0)


def is_valid(boxes: Array, *, xp: Any = keras.ops) -> Array:
    """Whether boxes have a positive area.

    Args:
        boxes: `(..., 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        xp: array namespace (see the module docstring).

    Returns:
        `(...)` booleans: `ymax > ymin and xmax > xmin`.
    """
    ymin, xmin, ymax, xmax = _unstack(boxes)
    return xp.logical_and(ymax > ymin, xmax > xmin)


def coco_to_boxes(coco_boxes: Array, height: Array, width: Array, *, xp: Any = np) -> Array:
    """COCO `[x, y, width, height]` pixel boxes to the internal format.

    Args:
        coco_boxes: `(..., 4)` boxes, COCO `[x, y, w, h]` in pixels of an image of size
            `height` x `width`.
        height: image height in pixels (a scalar, or an array broadcasting against `(...)`).
        width: image width in pixels (same).
        xp: array namespace (default `numpy`; see the module docstring).

    Returns:
        `(..., 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`. Not clipped.

    Example:
        >>> coco_to_boxes(np.array([10.0, 20.0, 30.0, 40.0]), 100, 200)
        array([0.2 , 0.05, 0.6 , 0.2 ])
    """
    x, y, w, h = _unstack(coco_boxes)
    return xp.stack([y / height, x / width, (y + h) / height, (x + w) / width], axis=-1)


def boxes_to_coco(boxes: Array, height: Array, width: Array, *, xp: Any = np) -> Array:
    """Internal boxes to COCO `[x, y, width, height]` pixel boxes; inverse of `coco_to_boxes`.

    Args:
        boxes: `(..., 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        height: image height in pixels (a scalar, or an array broadcasting against `(...)`).
        width: image width in pixels (same).
        xp: array namespace (default `numpy`; see the module docstring).

    Returns:
        `(..., 4)` COCO `[x, y, w, h]` boxes in pixels.

    Example:
        >>> boxes_to_coco(np.array([0.2, 0.05, 0.6, 0.2]), 100, 200)
        array([10., 20., 30., 40.])
    """
    ymin, xmin, ymax, xmax = _unstack(boxes)
    return xp.stack(
        [xmin * width, ymin * height, (xmax - xmin) * width, (ymax - ymin) * height], axis=-1
    )


def boxes_to_pixels(boxes: Array, height: Array, width: Array, *, xp: Any = np) -> Array:
    """Internal boxes to pixel corners `[ymin, xmin, ymax, xmax]` of a `height` x `width` image.

    Args:
        boxes: `(..., 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        height: image height in pixels (a scalar, or an array broadcasting against `(...)`).
        width: image width in pixels (same).
        xp: array namespace (default `numpy`; see the module docstring).

    Returns:
        `(..., 4)` boxes `[ymin, xmin, ymax, xmax]` in pixels.
    """
    ymin, xmin, ymax, xmax = _unstack(boxes)
    return xp.stack([ymin * height, xmin * width, ymax * height, xmax * width], axis=-1)
