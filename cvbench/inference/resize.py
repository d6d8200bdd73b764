"""The resize rules of `ModelInfo.resize`: an image of any size to the model's input.

Each image is brought to `ModelInfo.image_size` by its `ModelInfo.resize` rule (bilinear, on
float32 values, so nothing is rounded to integers):

* "stretch": resize to `image_size`, ignoring the aspect ratio;
* "center_crop": resize so that the image covers `round(side / crop_fraction)` on both axes
  (for a square input: the shorter side to `round(size / crop_fraction)`, the longer side in
  proportion, rounded to the nearest pixel), then crop the center `image_size` (offsets
  rounded down), as `cvbench.data.read.preprocessing.preprocess_for_eval` does
  (`ImagePreprocessing.eval_crop="resize_then_crop"`);
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
from PIL import Image

from cvbench.utils.model_file import ModelInfo


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
    scale = max(cover_h / height, cover_w / width)
    new_h = cover_h if scale == cover_h / height else round(height * scale)
    new_w = cover_w if scale == cover_w / width else round(width * scale)
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


def _resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    if image.shape[:2] == (height, width):
        return image
    channels = [
        np.asarray(
            Image.fromarray(image[..., c]).resize((width, height), Image.Resampling.BILINEAR)
        )
        for c in range(3)
    ]
    return np.stack(channels, axis=-1)


def resize_image(image: np.ndarray, info: ModelInfo) -> tuple[np.ndarray, Geometry]:
    """One image brought to `info.image_size` by `info.resize` (module docstring).

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
    image = np.ascontiguousarray(image, dtype=np.float32)
    height, width = image.shape[:2]
    out_h, out_w = info.image_size
    if info.resize == "stretch":
        geometry = Geometry((height, width), (out_h / height, out_w / width), (0, 0))
        return _resize(image, out_h, out_w), geometry
    if info.resize == "crop_then_resize":
        (top, left), (crop_h, crop_w) = central_crop_window(height, width, info.crop_fraction)
        cropped = image[top : top + crop_h, left : left + crop_w]
        sy, sx = out_h / crop_h, out_w / crop_w
        return _resize(cropped, out_h, out_w), Geometry(
            (height, width), (sy, sx), (top * sy, left * sx)
        )
    (new_h, new_w), (top, left) = center_crop_geometry(
        height, width, image_size=info.image_size, crop_fraction=info.crop_fraction
    )
    resized = _resize(image, new_h, new_w)[top : top + out_h, left : left + out_w]
    return resized, Geometry((height, width), (new_h / height, new_w / width), (top, left))
