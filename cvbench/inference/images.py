"""Images in, model-sized batches out: what `classify` and `detect` feed a model.

Inputs, in the order they are read (`iter_images`):

* a path to an image file, or a folder: its image files (extensions `IMAGE_EXTENSIONS`, any
  case), sorted by name, not recursive; the source of each image is its path (a `str`);
* a sequence of paths and folders, taken in order;
* a numpy array: one image `(H, W, 3)` or a batch `(B, H, W, 3)`, RGB in `[0, 255]` (any
  numeric dtype); a list of such images (sizes may differ); the source is the index;
* a `tf.data.Dataset` of images `(H, W, 3)` or of batches `(B, H, W, 3)` (elements that are
  tuples or dicts give their first entry or their `"image"` entry); the source is the index.

Files are decoded with Pillow (any format it reads; palette, grayscale, CMYK and 16-bit
modes to RGB, transparent pixels over white) and their EXIF orientation is not applied, as in
training. TensorFlow is imported only to read a `tf.data.Dataset`, which needs it loaded
already.

Each image is brought to the model's input size by its `ModelInfo.resize` rule (bilinear,
on float32 values, so nothing is rounded to integers):

* "stretch": resize to `image_size`, ignoring the aspect ratio;
* "center_crop": resize so that the image covers `round(side / crop_fraction)` on both axes
  (for a square input: the shorter side to `round(size / crop_fraction)`, the longer side in
  proportion, rounded to the nearest pixel), then crop the center `image_size` (offsets
  rounded down), as `cvbench.data.preprocessing.preprocess_for_eval` does.

An image already of the target size under "stretch" is passed through unchanged. Every image
keeps its original size and the `Geometry` that maps model-input pixels back to it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from cvbench.data.image_io import ImageError, to_rgb
from cvbench.utils.model_file import ModelInfo

#: File extensions read from a folder (compared in lower case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")

Source = str | int


@dataclass(frozen=True)
class Geometry:
    """How one image became the model input: `original = (model_pixel + offset) / scale`.

    Attributes:
        original_size: `(height, width)` of the original image in pixels.
        scale: `(y, x)` factors from original pixels to resized pixels.
        offset: `(top, left)` of the crop in resized pixels (0 for "stretch").
    """

    original_size: tuple[int, int]
    scale: tuple[float, float]
    offset: tuple[int, int]

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


@dataclass(frozen=True)
class Batch:
    """Model-ready images with where each came from.

    Attributes:
        sources: path (`str`) or index (`int`) of each image.
        images: `(B, H, W, 3)` float32 RGB in `[0, 255]`, `(H, W)` the model's input size.
        geometries: one `Geometry` per image.
    """

    sources: tuple[Source, ...]
    images: np.ndarray
    geometries: tuple[Geometry, ...]


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
    (new_h, new_w), (top, left) = center_crop_geometry(
        height, width, image_size=info.image_size, crop_fraction=info.crop_fraction
    )
    resized = _resize(image, new_h, new_w)[top : top + out_h, left : left + out_w]
    return resized, Geometry((height, width), (new_h / height, new_w / width), (top, left))


def read_image(path: str | os.PathLike) -> np.ndarray:
    """Decodes an image file to `(H, W, 3)` uint8 RGB.

    Raises:
        FileNotFoundError: for a missing file.
        ImageError: (a `ValueError`) naming the file, when Pillow cannot read it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no image file {path}")
    try:
        with Image.open(path) as image:
            image.load()
            return np.asarray(to_rgb(image), dtype=np.uint8)
    except Image.DecompressionBombError as err:
        raise ImageError(f"{path}: image too large: {err}") from None
    except (Image.UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        reason = (
            "not an image Pillow can read"
            if isinstance(err, Image.UnidentifiedImageError)
            else f"unreadable image: {err}"
        )
        raise ImageError(f"{path}: {reason}") from None


def list_image_files(folder: str | os.PathLike) -> list[Path]:
    """The image files of `folder` (`IMAGE_EXTENSIONS`, any case), sorted by name."""
    folder = Path(folder)
    return sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
    )


def _is_dataset(inputs: Any) -> bool:
    tf = sys.modules.get("tensorflow")  # a tf.data.Dataset means TensorFlow is loaded
    return tf is not None and isinstance(inputs, tf.data.Dataset)


def _dataset_images(dataset: Any) -> Iterator[np.ndarray]:
    for element in dataset.as_numpy_iterator():
        if isinstance(element, dict):
            if "image" not in element:
                raise ValueError(
                    f"dataset elements that are dicts need an 'image' key; got {sorted(element)}"
                )
            element = element["image"]
        elif isinstance(element, tuple | list):
            element = element[0]
        element = np.asarray(element)
        if element.ndim == 4:
            yield from element
        else:
            yield element


def _paths(inputs: Iterable[str | os.PathLike]) -> Iterator[Path]:
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            files = list_image_files(path)
            if not files:
                raise ValueError(f"folder {path} holds no image files ({IMAGE_EXTENSIONS})")
            yield from files
        elif path.exists():
            yield path
        else:
            raise FileNotFoundError(f"no image file or folder {path}")


def iter_images(inputs: Any) -> Iterator[tuple[Source, np.ndarray]]:
    """Every input image with its source (module docstring), decoded, in input order.

    Raises:
        ValueError: for an input of no supported kind, or a folder without images.
        FileNotFoundError: for a missing path.
        ImageError: (a `ValueError`) for a file that is not an image, naming it.
    """
    if isinstance(inputs, str | os.PathLike):
        inputs = [inputs]
    if _is_dataset(inputs):
        yield from enumerate(_dataset_images(inputs))
    elif isinstance(inputs, np.ndarray):
        if inputs.ndim == 3:
            yield 0, inputs
        elif inputs.ndim == 4:
            yield from enumerate(inputs)
        else:
            raise ValueError(
                f"an image array must be (H, W, 3) or (B, H, W, 3); got {inputs.shape}"
            )
    elif (
        isinstance(inputs, Sequence)
        and inputs
        and all(isinstance(x, str | os.PathLike) for x in inputs)
    ):
        for path in _paths(inputs):
            yield str(path), read_image(path)
    elif isinstance(inputs, Sequence) and inputs and all(isinstance(x, np.ndarray) for x in inputs):
        yield from enumerate(inputs)
    else:
        raise ValueError(
            "inputs must be image paths or folders, an array (H, W, 3) or (B, H, W, 3), a list "
            f"of arrays or a tf.data.Dataset of images; got {type(inputs).__name__} {inputs!r:.80}"
        )


def iter_batches(inputs: Any, info: ModelInfo, *, batch_size: int) -> Iterator[Batch]:
    """`iter_images` resized by `info` and grouped in batches of `batch_size` (the last one
    may be smaller).

    Raises:
        ValueError: for `batch_size < 1`, and as `iter_images` and `resize_image`.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1; got {batch_size!r}")
    sources, images, geometries = [], [], []
    for source, image in iter_images(inputs):
        resized, geometry = resize_image(image, info)
        sources.append(source)
        images.append(resized)
        geometries.append(geometry)
        if len(images) == batch_size:
            yield Batch(tuple(sources), np.stack(images), tuple(geometries))
            sources, images, geometries = [], [], []
    if images:
        yield Batch(tuple(sources), np.stack(images), tuple(geometries))
