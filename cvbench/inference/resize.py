"""The resize rules of `ModelInfo.resize`: an image of any size to the model's input.

Each image is brought to `ModelInfo.image_size` by its `ModelInfo.resize` rule, interpolating
by `ModelInfo.interpolation` on float32 values (nothing is rounded to integers) with
TensorFlow's arithmetic, so an image becomes the very pixels the evaluation pipeline gives the
model (`tf.image.resize` bilinear, or TF1's bilinear for "bilinear_tf1"):

* "stretch": resize to `image_size`, ignoring the aspect ratio;
* "center_crop": resize so that the image covers `round(side / crop_fraction)` on both axes
  (for a square input: the shorter side to `round(size / crop_fraction)`, the longer side in
  proportion, rounded to the nearest pixel), then crop the center `image_size` (offsets
  rounded down), as `cvbench.data.read.preprocessing.preprocess_for_eval` does
  (`ImagePreprocessing.eval_crop="center_crop"`: one vocabulary);
* "crop_then_resize": keep the central `crop_fraction` of each side (the window of
  `tf.image.central_crop`: `start = int((side - side * crop_fraction) / 2)`, `size = side -
  2 * start`), then resize it to `image_size` (`eval_crop="crop_then_resize"`, nvcnn's
  Inception V3).

An image already of the target size under "stretch" is passed through unchanged. Every image
keeps its original size and the `Geometry` that maps model-input pixels back to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cvbench.utils.model_file import InputSettings, ModelInfo


@dataclass(frozen=True)
class Geometry:
    """How one image became the model input: `original = (model_pixel + offset) / scale`.

    Attributes:
        original_size: `(height, width)` of the original image in pixels.
        scale: `(y, x)` factors from original pixels to resized pixels.
        offset: `(top, left)` of the crop in resized pixels (0 for "stretch"; for
            "crop_then_resize" the crop's corner times the scale, not a whole number).
    """

    original_size: tuple[int, int]
    scale: tuple[float, float]
    offset: tuple[float, float]

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """Model-input pixel boxes `[ymin, xmin, ymax, xmax]` to original-image pixels,
        clipped to the original image."""
        boxes = np.asarray(boxes, dtype=np.float64)
        sy, sx = self.scale
        top, left = self.offset
        y = (boxes[..., 0::2] + top) / sy
        x = (boxes[..., 1::2] + left) / sx
        height, width = self.original_size
        out = np.stack([y[..., 0], x[..., 0], y[..., 1], x[..., 1]], axis=-1)
        return np.clip(out, 0.0, [height, width, height, width])


def center_crop_geometry(
    height: int, width: int, *, image_size: Sequence[int], crop_fraction: float
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Resized size and crop offset of the "center_crop" rule (module docstring).

    Args:
        height: original height in pixels.
        width: original width in pixels.
        image_size: `(height, width)` of the model input.
        crop_fraction: fraction of the resized side kept, in `(0, 1]`.

    Returns:
        `((resized_height, resized_width), (top, left))`.

    Example:
        >>> center_crop_geometry(375, 500, image_size=(224, 224), crop_fraction=0.875)
        ((256, 341), (16, 58))
    """
    out_h, out_w = int(image_size[0]), int(image_size[1])
    cover_h, cover_w = round(out_h / crop_fraction), round(out_w / crop_fraction)
    # float32, as the pipeline's `resize_shorter_side`: the covering side comes out exact
    f = np.float32
    sides = np.array([height, width], np.float32)
    scale = max(f(cover_h) / sides[0], f(cover_w) / sides[1])
    new_h, new_w = (int(side) for side in np.round(sides * scale))
    new_h, new_w = max(new_h, out_h), max(new_w, out_w)
    return (new_h, new_w), ((new_h - out_h) // 2, (new_w - out_w) // 2)


def central_crop_window(
    height: int, width: int, crop_fraction: float
) -> tuple[tuple[int, int], tuple[int, int]]:
    """`((top, left), (crop_height, crop_width))` of `tf.image.central_crop(image,
    crop_fraction)` on a `height` x `width` image (the "crop_then_resize" rule).

    Example:
        >>> central_crop_window(375, 500, 0.875)  # int(46.875 / 2) = 23, int(62.5 / 2) = 31
        ((23, 31), (329, 438))
    """
    # float32, as the pipeline's `central_fraction_crop` (TensorFlow's float64 at 0.875)
    sides = np.array([height, width], np.float32)
    top, left = ((sides - sides * np.float32(crop_fraction)) / np.float32(2)).astype(np.int64)
    return (int(top), int(left)), (height - 2 * int(top), width - 2 * int(left))


def _axis_weights(in_size: int, out_size: int, interpolation: str):
    """TensorFlow's bilinear weights along one axis, in its float32 arithmetic
    (`resize_bilinear_op.cc`): source coordinate `(i + 0.5) * scale - 0.5` ("bilinear",
    half-pixel centres) or `i * scale` ("bilinear_tf1"), `scale = in_size / out_size`;
    neighbours `max(floor(x), 0)` and `min(ceil(x), in_size - 1)`, weight `x - floor(x)`."""
    f = np.float32
    scale = f(in_size) / f(out_size)
    x = np.arange(out_size, dtype=np.float32)
    x = (x + f(0.5)) * scale - f(0.5) if interpolation == "bilinear" else x * scale
    floor = np.floor(x)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(x), in_size - 1).astype(np.int64)
    return lower, upper, (x - floor).astype(np.float32)


def _resize(image: np.ndarray, height: int, width: int, interpolation: str) -> np.ndarray:
    """`(H, W, C)` float32 -> `(height, width, C)` float32, `tf.image.resize(image, (height,
    width), "bilinear")` (antialias off) or TF1's bilinear for "bilinear_tf1", bit for bit:
    `top + (bottom - top) * y_lerp` of `left + (right - left) * x_lerp`, in float32."""
    if interpolation not in ("bilinear", "bilinear_tf1"):
        raise ValueError(
            f"interpolation must be 'bilinear' or 'bilinear_tf1'; got {interpolation!r}"
        )
    top, bottom, y_lerp = _axis_weights(image.shape[0], height, interpolation)
    left, right, x_lerp = _axis_weights(image.shape[1], width, interpolation)
    x_lerp = x_lerp[:, None]
    rows_top, rows_bottom = image[top], image[bottom]
    top_values = rows_top[:, left] + (rows_top[:, right] - rows_top[:, left]) * x_lerp
    bottom_values = rows_bottom[:, left] + (rows_bottom[:, right] - rows_bottom[:, left]) * x_lerp
    return top_values + (bottom_values - top_values) * y_lerp[:, None, None]


def resize_image(image: np.ndarray, info: ModelInfo) -> tuple[np.ndarray, Geometry]:
    """One image brought to `info.image_size` by `info.resize` (module docstring), clipped to
    [0, 255] and truncated to integers with `info.quantize_uint8`.

    Args:
        image: `(H, W, 3)` RGB in `[0, 255]`, any numeric dtype.
        info: the model's `ModelInfo`.

    Returns:
        `(image (h, w, 3) float32, Geometry)` with `(h, w) = info.image_size`.

    Raises:
        ValueError: for an array that is not `(H, W, 3)` with H, W >= 1.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[-1] != 3 or min(image.shape[:2]) < 1:
        raise ValueError(f"an image must have shape (H, W, 3); got {image.shape}")
    inputs = info.inputs
    resized, geometry = _by_rule(np.ascontiguousarray(image, dtype=np.float32), inputs)
    if inputs.quantize_uint8:  # the pipeline's float32 -> uint8 cast truncates
        resized = np.clip(resized, 0.0, 255.0).astype(np.uint8).astype(np.float32)
    return resized, geometry


def _by_rule(image: np.ndarray, info: InputSettings) -> tuple[np.ndarray, Geometry]:
    height, width = image.shape[:2]
    out_h, out_w = info.image_size
    if info.resize == "stretch":
        geometry = Geometry((height, width), (out_h / height, out_w / width), (0, 0))
        return _resize(image, out_h, out_w, info.interpolation), geometry
    if info.resize == "crop_then_resize":
        (top, left), (crop_h, crop_w) = central_crop_window(height, width, info.crop_fraction)
        cropped = image[top : top + crop_h, left : left + crop_w]
        sy, sx = out_h / crop_h, out_w / crop_w
        return _resize(cropped, out_h, out_w, info.interpolation), Geometry(
            (height, width), (sy, sx), (top * sy, left * sx)
        )
    (new_h, new_w), (top, left) = center_crop_geometry(
        height, width, image_size=info.image_size, crop_fraction=info.crop_fraction
    )
    resized = _resize(image, new_h, new_w, info.interpolation)
    return resized[top : top + out_h, left : left + out_w], Geometry(
        (height, width), (new_h / height, new_w / width), (top, left)
    )
