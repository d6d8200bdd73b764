"""Images in, model-sized batches out: what `classify` and `detect` feed a model.

Inputs, in the order they are read (`iter_images`):

* a path to an image file, or a folder: its image files (extensions `IMAGE_EXTENSIONS`, any
  case), sorted by name, not recursive; the source of each image is its path (a `str`);
* a sequence of paths and folders, taken in order;
* a numpy array: one image `(H, W, 3)` or a batch `(B, H, W, 3)`, RGB in `[0, 255]` (any
  integer or float dtype); a list of such images (sizes may differ); the source is the index;
* a `tf.data.Dataset` of images `(H, W, 3)` or of batches `(B, H, W, 3)` (elements that are
  tuples or dicts give their first entry or their `"image"` entry); the source is the index.

Arrays (and a dataset's images) are taken as they are, in `[0, 255]` whatever their dtype, as
Keras gives images (`keras.utils.img_to_array`: float32 in `[0, 255]`) and as `Batch.images`
holds them; the wide-pixel rule below is for files, whose format says what their values mean.
An array whose values say it is in another range gets one `UserWarning` per call, naming the
first such image and its range: a float array in `[0, 1]` (its largest value in `(0, 1]`:
what `matplotlib.pyplot.imread`, `skimage.img_as_float`, `tf.image.convert_image_dtype` and
torchvision's `ToTensor` give; multiply by 255) would be classified as a near-black image, and
values outside `[0, 255]` (a uint16 image of `0..65535`: scale by `255 / 65535`) as a
saturated one. An array with NaN or infinite values, of complex numbers or of a type that is
no number (bool, strings, objects) is refused (`ValueError` naming the image's index).

Files are decoded with Pillow (any format it reads; palette, grayscale, CMYK modes to RGB,
transparent pixels over white) and their EXIF orientation is not applied, as in training.
Given the model's `ModelInfo` (as `classify`, `detect` and `cvbench predict` give it), RGB and
grayscale JPEG files are decoded as the model's training pipeline decoded them instead: by
libjpeg-turbo through `simplejpeg`, with the info's `dct_method` and `fancy_upscaling`, the
pixels of TensorFlow's `decode_jpeg` with those options (tests/inference/test_jpeg_decoding.py
checks them equal; Pillow's differ by a few levels, up to 14 against DLE's options). A JPEG that
`simplejpeg` refuses for a few stray bytes before a marker (at most `MAX_STRAY_JPEG_BYTES`,
which TensorFlow decodes too) goes to Pillow; any other libjpeg complaint (scan data cut short
or garbled behind a valid header: "premature end of data segment", thousands of "extraneous
bytes", a truncated file) makes it a corrupt image, never classified: Pillow would fill the
missing rows and say nothing. Pixels wider than 8 bits are brought to `[0, 255]` by the rule
the builders use too (`to_rgb_array`, from `cvbench.data.image_io`, whose docstring states it),
so a file gives the pixels a model was trained on:

* float (Pillow mode "F", e.g. a float32 TIFF): taken to be in `[0, 1]`, times 255, clipped;
* unsigned 16-bit ("I;16", ...: 16-bit PNG and TIFF): `v * 255 / 65535`;
* 32-bit and signed integers ("I", "I;16S", ...: int32 TIFF): kept when every value is in
  `[0, 255]`, scaled by `255 / 65535` when every value is in `[0, 65535]`, else from the
  image's own minimum and maximum;

then rounded to uint8 (one grey channel repeated to RGB). A file
must be a regular file of at most `MAX_IMAGE_BYTES` (a FIFO, a device such as `/dev/zero`, a
2 GiB sparse file are refused before a byte is read); its width and height are read from its
header and checked against `max_image_pixels` (`MAX_IMAGE_PIXELS`, 64 megapixels) before it is
decoded. Decoding and resizing one image of `MAX_IMAGE_PIXELS` then allocate at most
`IMAGE_BYTES_PER_PIXEL` bytes per pixel together (the file's bytes, Pillow's decoded image,
the uint8 RGB array and the float32 copy the resize works on). A batch holds at most
`max_image_pixels` model-input pixels: a model whose `image_size` is larger is refused
(`BadFileError`), and the batch size is lowered for one whose `image_size` times the batch is.
A file that cannot be read or is over a limit raises `ImageFileError`
(a `cvbench.utils.errors.BadFileError`) naming it; `skip_corrupt=True` skips such files
instead, reporting each to `on_skip`. TensorFlow is imported only to read a
`tf.data.Dataset`, which needs it loaded already.

Each image is brought to the model's input size by its `ModelInfo.resize` rule
(`cvbench.inference.resize`), keeping its original size and the `Geometry` that maps
model-input pixels back to it.
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from PIL import Image

from cvbench.data.image_io import DEFAULT_MAX_PIXELS, ImageError, to_rgb_array
from cvbench.inference.resize import (  # noqa: F401 - re-exported: the resize rules
    Geometry,
    center_crop_geometry,
    central_crop_window,
    resize_image,
)
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import read_input
from cvbench.utils.model_file import ModelInfo

#: File extensions read from a folder (compared in lower case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
#: Largest image file decoded by default, in pixels (width x height): the builders' and the
#: readers' bound (`DEFAULT_MAX_PIXELS`, 64 megapixels), a 192 MB RGB array (768 MB as the
#: float32 the resize works on).
MAX_IMAGE_PIXELS = DEFAULT_MAX_PIXELS
#: Largest image file read, in bytes (a 64-megapixel PNG of noise is about 200 MB).
MAX_IMAGE_BYTES = 256 << 20
#: What decoding and resizing one image allocate at most, per pixel, all together: 64
#: megapixels take at most 1.28 GB (measured: 0.98 GB for a float TIFF, 0.96 GB for an RGB
#: JPEG, the uint8 image and the float32 copy the resize works on; checked by
#: tests/reliability/test_hostile_models.py).
IMAGE_BYTES_PER_PIXEL = 20
#: Stray bytes before a JPEG marker accepted as harmless (libjpeg's "extraneous bytes" warning;
#: TensorFlow's decoder ignores it); more mean scan data that did not decode as written.
MAX_STRAY_JPEG_BYTES = 16
_STRAY_BYTES = re.compile(
    r"^Corrupt JPEG data: (\d+) extraneous bytes before marker 0x[0-9a-f]{2}$"
)
#: Pillow's own limit is a process-wide setting; it is lifted only while a header is read.
_PILLOW_LIMIT_LOCK = threading.Lock()

Source = str | int
#: What `predict_batches` returns per image (a `Classification`, a `Detection`).
Result = TypeVar("Result")
#: Called with each image file `skip_corrupt=True` skips.
OnSkip = Callable[["ImageFileError"], None]


class ImageFileError(BadFileError, ImageError):
    """An image file that cannot be read, or is over the pixel limit; the message names it."""


class ImageTooLargeError(ImageFileError):
    """An image file over `max_image_pixels`; the message names the limit and how to raise it."""


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


def read_image(
    path: str | os.PathLike,
    *,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
    info: ModelInfo | None = None,
) -> np.ndarray:
    """Decodes an image file to `(H, W, 3)` uint8 RGB (module docstring: wide pixels, JPEG).

    Args:
        path: the image file.
        max_image_pixels: the largest width x height decoded, checked from the header first.
        info: the model's `ModelInfo`: JPEG files decoded with its pipeline's JPEG options;
            None: Pillow decodes every file.

    Raises:
        FileNotFoundError: for a missing file.
        ImageTooLargeError: (an `ImageFileError`) for a file over `max_image_pixels`.
        ImageFileError: (a `BadFileError` and a `cvbench.data.image_io.ImageError`) naming
            the file, when Pillow cannot read it.
        OSError: when the disk cannot be read (not a problem of the file's content).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no image file {path}")
    try:
        data = read_input(path, limit=MAX_IMAGE_BYTES, what="image")
    except BadFileError as err:
        raise ImageFileError(str(err)) from None
    try:
        with _open_header(data) as image:
            width, height = image.size
            if width * height > max_image_pixels:
                raise ImageTooLargeError(
                    f"{path}: image of {width} x {height} = {width * height} pixels is over the "
                    f"limit of {max_image_pixels} pixels; pass max_image_pixels=N to raise it"
                )
            if image.format == "JPEG" and image.mode in ("RGB", "L"):
                pixels = _decode_jpeg(path, data, info)
                if pixels is not None:
                    return pixels
            image.load()
            return to_rgb_array(image)
    except (Image.UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        if isinstance(err, ImageFileError):
            raise
        if isinstance(err, OSError) and err.errno is not None:
            raise  # the disk or the permissions, not the content: one line naming the path
        reason = (
            "not an image Pillow can read"
            if isinstance(err, Image.UnidentifiedImageError)
            else f"unreadable image: {err}"
        )
        raise ImageFileError(f"{path}: {reason}") from None


def _decode_jpeg(path: Path, data: bytes, info: ModelInfo | None) -> np.ndarray | None:
    """The JPEG file's pixels as `tf.io.decode_jpeg(data, channels=3, dct_method=...,
    fancy_upscaling=...)` gives them (libjpeg-turbo's fast IDCT for "" and "INTEGER_FAST"),
    decoded strictly (`simplejpeg`: a libjpeg warning is an error); None when `info` is None
    (after the strict decode: Pillow decodes) or when the only complaint is a few stray bytes
    before a marker (Pillow decodes too).

    Raises:
        ImageFileError: any other complaint of libjpeg (module docstring).
    """
    import simplejpeg

    options = (
        {"fastdct": False, "fastupsample": False}
        if info is None
        else {
            "fastdct": info.dct_method in ("", "INTEGER_FAST"),
            "fastupsample": not info.fancy_upscaling,
        }
    )
    try:
        pixels = simplejpeg.decode_jpeg(data, colorspace="RGB", **options)
    except ValueError as err:
        stray = _STRAY_BYTES.match(str(err))
        if stray and int(stray.group(1)) <= MAX_STRAY_JPEG_BYTES:
            return None
        raise ImageFileError(f"{path}: corrupt JPEG data ({err})") from None
    return None if info is None else pixels


def _open_header(data: bytes) -> Image.Image:
    """`Image.open` of a file's bytes (the header only) without Pillow's process-wide pixel
    limit and its warning: `read_image` checks its own limit before decoding."""
    with _PILLOW_LIMIT_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            return Image.open(io.BytesIO(data))
        finally:
            Image.MAX_IMAGE_PIXELS = saved


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


def image_paths(inputs: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The image files that path inputs name, in the order `iter_images` reads them.

    Raises:
        ValueError: for a folder without images.
        FileNotFoundError: for a missing path.
    """
    if isinstance(inputs, str | os.PathLike):
        inputs = [inputs]
    return list(_paths(inputs))


def _read_paths(
    paths: Iterable[Path],
    *,
    skip_corrupt: bool,
    on_skip: OnSkip | None,
    max_image_pixels: int,
    info: ModelInfo | None,
) -> Iterator[tuple[Source, np.ndarray]]:
    for path in paths:
        try:
            image = read_image(path, max_image_pixels=max_image_pixels, info=info)
        except ImageFileError as err:
            if skip_corrupt:
                if on_skip is not None:
                    on_skip(err)
                continue
            if isinstance(err, ImageTooLargeError):
                raise
            raise ImageFileError(f"{err}; pass skip_corrupt=True to skip such files") from None
        yield str(path), image


def iter_images(
    inputs: Any,
    *,
    skip_corrupt: bool = False,
    on_skip: OnSkip | None = None,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
    info: ModelInfo | None = None,
) -> Iterator[tuple[Source, np.ndarray]]:
    """Every input image with its source (module docstring), decoded, in input order.

    Args:
        inputs: paths, folders, arrays or a dataset (module docstring).
        skip_corrupt: skip image files that cannot be read or are over `max_image_pixels`
            instead of raising.
        on_skip: called with the `ImageFileError` of each file skipped.
        max_image_pixels: the largest width x height of an image file decoded.
        info: the model's `ModelInfo`, for JPEG files (`read_image`).

    Raises:
        ValueError: for an input of no supported kind, a folder without images, or an array
            image with NaN or infinite values, complex values or values that are no numbers
            (naming its index).
        FileNotFoundError: for a missing path.
        ImageFileError: (a `BadFileError`) for a file that is not an image or is over
            `max_image_pixels`, naming it (unless `skip_corrupt`).

    Warns:
        UserWarning: once, for the first array image that is not in `[0, 255]` or whose
            values are floats in `[0, 1]` (module docstring).
    """
    if isinstance(inputs, str | os.PathLike):
        inputs = [inputs]
    inputs = _as_array(inputs)
    if isinstance(inputs, list | tuple):
        inputs = [_as_array(x) for x in inputs]
    if _is_dataset(inputs):
        yield from _checked_arrays(_dataset_images(inputs))
    elif isinstance(inputs, np.ndarray):
        if inputs.ndim not in (3, 4):
            raise ValueError(
                f"an image array must be (H, W, 3) or (B, H, W, 3); got {inputs.shape}"
            )
        yield from _checked_arrays([inputs] if inputs.ndim == 3 else inputs)
    elif (
        isinstance(inputs, Sequence)
        and inputs
        and all(isinstance(x, str | os.PathLike) for x in inputs)
    ):
        yield from _read_paths(
            _paths(inputs),
            skip_corrupt=skip_corrupt,
            on_skip=on_skip,
            max_image_pixels=max_image_pixels,
            info=info,
        )
    elif isinstance(inputs, Sequence) and inputs and all(isinstance(x, np.ndarray) for x in inputs):
        yield from _checked_arrays(inputs)
    else:
        raise ValueError(
            "inputs must be image paths or folders, an array (H, W, 3) or (B, H, W, 3) (NumPy, "
            "or a tensor: anything with __array__), a list of arrays or a tf.data.Dataset of "
            f"images; got {type(inputs).__name__} {inputs!r:.80}"
        )


def _as_array(value: Any) -> Any:
    """A tensor of another framework (a `jax.Array`, a `tf.Tensor`, a CPU `torch.Tensor`:
    anything with `__array__`) as the NumPy array it holds, what a notebook of either Keras
    backend passes; anything else as it is."""
    if isinstance(value, np.ndarray | str | bytes | os.PathLike) or not hasattr(value, "__array__"):
        return value
    return np.asarray(value)


def _checked_arrays(images: Iterable[Any]) -> Iterator[tuple[Source, np.ndarray]]:
    """`(index, image)` of array images, each checked by `array_range_warning`; its first
    warning given (one per call, not one per image of a batch)."""
    warned = False
    for index, image in enumerate(images):
        message = array_range_warning(index, image)
        if message is not None and not warned:
            warnings.warn(message, UserWarning, stacklevel=2)
            warned = True
        yield index, image


def array_range_warning(index: int, image: Any) -> str | None:
    """What is wrong with the range of array image `index` for `[0, 255]` RGB (module
    docstring), or None.

    Example:
        >>> array_range_warning(0, np.array([[[0, 128, 255]]], np.uint8)) is None
        True
        >>> print(array_range_warning(3, np.full((1, 1, 3), 0.5, np.float32)))  # doctest: +ELLIPSIS
        image 3: float32 values in [0.5, 0.5]: arrays are read as RGB in [0, 255], as they are; ...

    Raises:
        ValueError: naming `index`, for NaN or infinite values, complex values, or a type
            that is no number (bool, strings, objects).
    """
    image = np.asarray(image)
    kind = image.dtype.kind
    if kind not in "iuf":
        what = "complex numbers" if kind == "c" else f"{image.dtype} values, not numbers"
        raise ValueError(f"image {index}: an image array of {what}; give real RGB in [0, 255]")
    if image.size == 0 or image.dtype == np.uint8:
        return None  # no pixels (the resize names the shape); uint8 is [0, 255]
    if kind == "f" and not np.isfinite(image).all():
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(image))[0])
        raise ValueError(
            f"image {index}: NaN or infinite pixel values (the first at {where}); an image "
            "array must hold finite RGB values in [0, 255]"
        )
    low, high = image.min().item(), image.max().item()
    if kind == "f" and 0 < high <= 1.0:
        hint = (
            "a [0, 1] image (matplotlib's imread, skimage's img_as_float, torchvision's "
            "ToTensor) is nearly black so: multiply it by 255"
        )
    elif low < 0 or high > 255:
        hint = "values outside it are out of range: scale it (a 16-bit image by 255 / 65535)"
    else:
        return None
    return (
        f"image {index}: {image.dtype} values in [{low:g}, {high:g}]: arrays are read as RGB "
        f"in [0, 255], as they are; {hint}"
    )


def batch_size_within(
    info: ModelInfo, batch_size: int, *, max_image_pixels: int, model: Any = None
) -> int:
    """The largest batch size up to `batch_size` whose model inputs (`info.image_size`) hold
    at most `max_image_pixels` pixels together (at least 1).

    Raises:
        BadFileError: one model input alone is over `max_image_pixels` (a model whose input
            size is free, `(None, None, 3)`, with a huge `image_size` in its `ModelInfo`).

    Example:
        >>> info = ModelInfo(task="classification", class_names=("a",), image_size=(100, 100))
        >>> batch_size_within(info, 32, max_image_pixels=50_000)
        5
        >>> batch_size_within(info, 32, max_image_pixels=5_000)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: the model's input of 100 x 100 = 10000 pixels...
    """
    height, width = info.image_size
    pixels = height * width
    if pixels > max_image_pixels:
        where = "" if model is None else f"{os.fspath(model)}: "
        raise BadFileError(
            f"{where}the model's input of {height} x {width} = {pixels} pixels (its ModelInfo "
            f"image_size) is over the limit of {max_image_pixels} pixels per batch; pass "
            "max_image_pixels=N to raise it"
        )
    return max(1, min(batch_size, max_image_pixels // pixels))


def iter_batches(
    inputs: Any,
    info: ModelInfo,
    *,
    batch_size: int,
    skip_corrupt: bool = False,
    on_skip: OnSkip | None = None,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
) -> Iterator[Batch]:
    """`iter_images` resized by `info` and grouped in batches of `batch_size` (the last one
    may be smaller); `skip_corrupt`, `on_skip` and `max_image_pixels` as `iter_images`.

    A batch holds at most `max_image_pixels` model-input pixels (`batch_size_within`): the
    batches are smaller where `info.image_size` times `batch_size` is more.

    Raises:
        ValueError: for `batch_size < 1`, and as `iter_images` and `resize_image`.
        BadFileError: for an `info.image_size` over `max_image_pixels`, before any image is
            read.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1; got {batch_size!r}")
    batch_size = batch_size_within(info, batch_size, max_image_pixels=max_image_pixels)
    sources, images, geometries = [], [], []
    images_in = iter_images(
        inputs,
        skip_corrupt=skip_corrupt,
        on_skip=on_skip,
        max_image_pixels=max_image_pixels,
        info=info,
    )
    for source, image in images_in:
        resized, geometry = resize_image(image, info)
        sources.append(source)
        images.append(resized)
        geometries.append(geometry)
        if len(images) == batch_size:
            yield Batch(tuple(sources), np.stack(images), tuple(geometries))
            sources, images, geometries = [], [], []
    if images:
        yield Batch(tuple(sources), np.stack(images), tuple(geometries))


@dataclass(frozen=True)
class ReadOptions:
    """How `predict_batches` reads and batches images (the arguments `classify` and `detect`
    share): images per model call, and `skip_corrupt`, `on_skip`, `max_image_pixels` as
    `iter_images`."""

    batch_size: int
    skip_corrupt: bool = False
    on_skip: OnSkip | None = None
    max_image_pixels: int = MAX_IMAGE_PIXELS


def predict_batches(
    model: Any,
    inputs: Any,
    info: ModelInfo,
    results_of: Callable[[Any, Batch], Iterable[Result]],
    *,
    read: ReadOptions,
) -> list[Result]:
    """The one batch loop of inference: `inputs` in `iter_batches` of `info`, each batch
    through `model.predict_on_batch`, and its outputs turned into one result per image by
    `results_of(outputs, batch)`, in input order. `classify` and `detect` differ only in
    `results_of`.

    Raises:
        as `iter_batches` and `results_of`.
    """
    results: list[Result] = []
    batches = iter_batches(
        inputs,
        info,
        batch_size=read.batch_size,
        skip_corrupt=read.skip_corrupt,
        on_skip=read.on_skip,
        max_image_pixels=read.max_image_pixels,
    )
    for batch in batches:
        results.extend(results_of(model.predict_on_batch(batch.images), batch))
    return results
