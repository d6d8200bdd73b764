"""Pixel box formats of the inference results: "xyxy" (the default), "xywh" (COCO), "yxyx".

Inside cvbench boxes are `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`
(`cvbench.detection.box_ops`); results for users are in pixels of the original image:

* "xyxy": `[xmin, ymin, xmax, ymax]` (torchvision, keras-hub's "xyxy", Pillow's drawing);
* "xywh": `[xmin, ymin, width, height]` (COCO's `bbox`);
* "yxyx": `[ymin, xmin, ymax, xmax]` (the TF Object Detection API's order, in pixels).
"""

from __future__ import annotations

import numpy as np

BOX_FORMATS = ("xyxy", "xywh", "yxyx")


def check_box_format(box_format: str) -> str:
    """Returns `box_format`; raises `ValueError` naming it when it is not in `BOX_FORMATS`."""
    if box_format not in BOX_FORMATS:
        raise ValueError(f"box_format must be one of {BOX_FORMATS}; got {box_format!r}")
    return box_format


def from_yxyx(boxes: np.ndarray, box_format: str) -> np.ndarray:
    """`(..., 4)` pixel boxes `[ymin, xmin, ymax, xmax]` in `box_format`.

    Example:
        >>> from_yxyx(np.array([10.0, 20.0, 30.0, 60.0]), "xywh")
        array([20., 10., 40., 20.])
    """
    check_box_format(box_format)
    boxes = np.asarray(boxes)
    ymin, xmin, ymax, xmax = (boxes[..., i] for i in range(4))
    if box_format == "xyxy":
        return np.stack([xmin, ymin, xmax, ymax], axis=-1)
    if box_format == "xywh":
        return np.stack([xmin, ymin, xmax - xmin, ymax - ymin], axis=-1)
    return boxes.copy()


def to_yxyx(boxes: np.ndarray, box_format: str) -> np.ndarray:
    """The inverse of `from_yxyx`: `(..., 4)` pixel boxes in `box_format` to
    `[ymin, xmin, ymax, xmax]`.

    Example:
        >>> to_yxyx(np.array([20.0, 10.0, 40.0, 20.0]), "xywh")
        array([10., 20., 30., 60.])
    """
    check_box_format(box_format)
    boxes = np.asarray(boxes)
    a, b, c, d = (boxes[..., i] for i in range(4))
    if box_format == "xyxy":
        return np.stack([b, a, d, c], axis=-1)
    if box_format == "xywh":
        return np.stack([b, a, b + d, a + c], axis=-1)
    return boxes.copy()
