"""Faster R-CNN box coder: boxes relative to anchors, scaled (SSD320 v1.2: 10, 10, 5, 5).

With anchor centre `(ya, xa)` and size `(ha, wa)` and box centre `(y, x)` and size `(h, w)`,
the code of a box is

    ty = sy * (y - ya) / ha'        th = sh * log(h' / ha')
    tx = sx * (x - xa) / wa'        tw = sw * log(w' / wa')

where `v' = v + EPSILON` (the TF Object Detection API adds 1e-8 to every size so that
degenerate boxes give finite codes). `decode` solves those equations for the box, the
epsilon included, so `decode(encode(b, a), a) == b` up to float rounding and
`encode(decode(t, a), a) == t` for finite codes. Decoding does not clip: a very large `th`
or `tw` overflows to an infinite box, which `box_ops.clip` brings back to the image.

Boxes and anchors are `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` (see `box_ops`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras

#: Code scales (y, x, h, w) of SSD320 v1.2 (Faster R-CNN box coder 10/10/5/5).
DEFAULT_SCALES = (10.0, 10.0, 5.0, 5.0)
#: Number of numbers per box code.
CODE_SIZE = 4
#: Added to every height and width before dividing or taking a log.
EPSILON = 1e-8

Array = Any


def _check_scales(scales: Sequence[float]) -> tuple[float, float, float, float]:
    if len(scales) != CODE_SIZE or not all(s > 0 for s in scales):
        raise ValueError(f"scales must be 4 positive numbers (y, x, h, w); got {scales!r}")
    return tuple(float(s) for s in scales)


def _center_size(boxes: Array) -> tuple[Array, Array, Array, Array]:
    ymin, xmin, ymax, xmax = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    height = ymax - ymin
    width = xmax - xmin
    return ymin + 0.5 * height, xmin + 0.5 * width, height + EPSILON, width + EPSILON


def encode(
    boxes: Array,
    anchors: Array,
    *,
    scales: Sequence[float] = DEFAULT_SCALES,
    xp: Any = keras.ops,
) -> Array:
    """Encodes boxes relative to anchors; the inverse of `decode`.

    Args:
        boxes: `(..., N, 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        anchors: `(N, 4)` anchors, same format (broadcast against `boxes`).
        scales: `(sy, sx, sh, sw)` multipliers of the codes.
        xp: array namespace (see `box_ops`).

    Returns:
        `(..., N, 4)` codes `[ty, tx, th, tw]`.

    Raises:
        ValueError: if `scales` is not 4 positive numbers.
    """
    sy, sx, sh, sw = _check_scales(scales)
    yc, xc, h, w = _center_size(boxes)
    yca, xca, ha, wa = _center_size(anchors)
    return xp.stack(
        [
            sy * (yc - yca) / ha,
            sx * (xc - xca) / wa,
            sh * xp.log(h / ha),
            sw * xp.log(w / wa),
        ],
        axis=-1,
    )


def decode(
    codes: Array,
    anchors: Array,
    *,
    scales: Sequence[float] = DEFAULT_SCALES,
    xp: Any = keras.ops,
) -> Array:
    """Decodes codes relative to anchors into boxes; the inverse of `encode`.

    Args:
        codes: `(..., N, 4)` codes `[ty, tx, th, tw]` (e.g. the model's box outputs).
        anchors: `(N, 4)` anchors, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`.
        scales: `(sy, sx, sh, sw)`, the same as for `encode`.
        xp: array namespace (see `box_ops`).

    Returns:
        `(..., N, 4)` boxes, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` (not clipped).

    Raises:
        ValueError: if `scales` is not 4 positive numbers.
    """
    sy, sx, sh, sw = _check_scales(scales)
    yca, xca, ha, wa = _center_size(anchors)
    ty, tx, th, tw = codes[..., 0], codes[..., 1], codes[..., 2], codes[..., 3]
    yc = ty / sy * ha + yca
    xc = tx / sx * wa + xca
    # Sizes carry the epsilon (see `_center_size`); take it off again.
    h = xp.exp(th / sh) * ha - EPSILON
    w = xp.exp(tw / sw) * wa - EPSILON
    return xp.stack([yc - 0.5 * h, xc - 0.5 * w, yc + 0.5 * h, xc + 0.5 * w], axis=-1)
