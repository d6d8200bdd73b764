"""The classification input recipe (`ImagePreprocessing`) in NumPy: decode, crop, resize, scale.

What `cvbench.data.read.preprocessing` does with TensorFlow ops, for the grain path:

* `decode_image`: JPEG bytes through libjpeg-turbo (`simplejpeg`) with the recipe's
  `dct_method` / `fancy_upscaling` (the pixels `tf.io.decode_jpeg` gives with those options,
  as `cvbench.inference.images` decodes), anything else (and a JPEG simplejpeg refuses)
  through Pillow, as RGB uint8.
* `random_crop_window`: `tf.image.sample_distorted_bounding_box`'s sampling rule
  (`sample_distorted_bounding_box_op.cc`: an aspect ratio uniform in the range, a height
  uniform between the rounded heights of the smallest and largest area, the window kept when
  it covers `min_object_covered` of a box (the whole image without boxes), up to
  `max_attempts` tries, else the whole image), drawn from a NumPy `Generator` (not
  TensorFlow's Philox stream: the same distribution, other windows).
* `resize_bilinear`: `tf.image.resize(..., "bilinear")` (half-pixel centres, no antialias)
  or TF1's ("bilinear_tf1"), with TensorFlow's float32 arithmetic step by step (the same
  interpolation weights, the same `top + (bottom - top) * lerp` order), so evaluation images
  equal tf.data's bit for bit (tests/data/grain/test_grain_equivalence.py). Only the output
  pixels asked for are computed: the evaluation's central crop and the training crop's
  window are index arithmetic, not copies.
* `train_image` / `eval_image`: the training crop, flip (p = 0.5, before the resize, as the
  tf.data path; after it for "bilinear_tf1") and resize, or the evaluation view, then
  `scale_input` (`(x - mean) / std` or `x / 127.5 - 1`, in the pipeline as tf.data does).

Other resize methods (bicubic, area, ...) raise ValueError here: this path has bilinear only.
"""

from __future__ import annotations

import functools
import io
import math
import threading

import numpy as np

from cvbench.data.read.image_preprocessing import ImagePreprocessing

RESIZE_METHODS = ("bilinear", "bilinear_tf1")


def supported_preprocessing(preprocessing: ImagePreprocessing | None) -> ImagePreprocessing:
    """`preprocessing` (None: the defaults), refused when this path cannot run it.

    Raises:
        ValueError: not an `ImagePreprocessing`, or a resize method other than bilinear.
    """
    p = ImagePreprocessing() if preprocessing is None else preprocessing
    if not isinstance(p, ImagePreprocessing):
        raise ValueError(f"preprocessing must be an ImagePreprocessing or None, got {p!r}")
    if p.resize_method not in RESIZE_METHODS:
        raise ValueError(
            f"the grain input path resizes with {' or '.join(RESIZE_METHODS)} only, got "
            f"resize_method={p.resize_method!r}"
        )
    return p


def is_jpeg(data: bytes) -> bool:
    """`tf.io.is_jpeg`'s test: the first three bytes are a JPEG SOI and marker."""
    return data[:3] == b"\xff\xd8\xff"


def decode_image(data: bytes, *, preprocessing: ImagePreprocessing | None = None) -> np.ndarray:
    """Encoded image bytes -> uint8 [height, width, 3] RGB.

    Raises:
        ValueError: the bytes are no image Pillow or libjpeg-turbo can read (the reason).

    Example:
        >>> from PIL import Image
        >>> buf = io.BytesIO()
        >>> Image.new("RGB", (5, 3), (10, 200, 30)).save(buf, "PNG")
        >>> image = decode_image(buf.getvalue())
        >>> image.shape, image.dtype.name, image[0, 0].tolist()
        ((3, 5, 3), 'uint8', [10, 200, 30])
    """
    p = ImagePreprocessing() if preprocessing is None else preprocessing
    if is_jpeg(data):
        import simplejpeg

        try:
            return simplejpeg.decode_jpeg(
                data,
                colorspace="RGB",
                fastdct=p.dct_method in ("", "INTEGER_FAST"),
                fastupsample=not p.fancy_upscaling,
            )
        except ValueError:
            pass  # CMYK, a libjpeg warning: Pillow decides
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ValueError(f"undecodable image ({len(data)} bytes): {e}") from None


# ---- bilinear resizing, TensorFlow's arithmetic --------------------------------------------


class _Scratch(threading.local):
    """This thread's reused work arrays, by name. A NumPy temporary of a few hundred KiB is
    a fresh allocation each time, which glibc often maps and unmaps (its dynamic mmap and
    trim thresholds), paying a page fault for every 4 KiB touched: for the resize's
    temporaries that cost more than the arithmetic. Reusing one buffer per name per thread
    does not (arrays over `LIMIT` bytes are not kept)."""

    LIMIT = 32 << 20

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def array(self, name: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
        """An uninitialised C-contiguous `shape` array of `dtype`; valid until the next
        `array(name, ...)` of this thread."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.LIMIT:
            return np.empty(shape, dtype)
        buffer = self.buffers.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self.buffers[name] = np.empty(max(nbytes, 1), np.uint8)
        return buffer[:nbytes].view(dtype).reshape(shape)


_SCRATCH = _Scratch()


@functools.lru_cache(maxsize=4096)
def _weights(
    out_size: int, in_size: int, *, half_pixel: bool, start: int = 0, count: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(lower, upper, lerp)` for output positions `start .. start + count` of a resize from
    `in_size` to `out_size`: `resize_bilinear_op.cc`'s `compute_interpolation_weights`, in
    float32 (`scale = in / out`; `in = (x + 0.5) * scale - 0.5` or `x * scale`). Cached (a
    training crop's sizes recur), so the arrays are read-only."""
    count = out_size - start if count is None else count
    scale = np.float32(in_size) / np.float32(out_size)
    x = np.arange(start, start + count, dtype=np.float32)
    pos = (x + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else x * scale
    floor = np.floor(pos)
    lower = np.maximum(floor, 0).astype(np.intp)
    upper = np.minimum(np.ceil(pos), in_size - 1).astype(np.intp)
    out = lower, upper, (pos - floor).astype(np.float32)
    for array in out:
        array.flags.writeable = False
    return out


def _check_inside(name: str, box: tuple[int, int, int, int], shape: tuple[int, int]) -> None:
    """Refuses a `(top, left, height, width)` box that is empty or not inside `shape`."""
    top, left, height, width = box
    if (
        min(top, left) < 0
        or min(height, width) <= 0
        or top + height > shape[0]
        or left + width > shape[1]
    ):
        raise ValueError(
            f"{name} {tuple(box)} (top, left, height, width) is not inside {shape[0]} x {shape[1]}"
        )


def resize_bilinear(
    image: np.ndarray,
    size: tuple[int, int],
    *,
    method: str = "bilinear",
    window: tuple[int, int, int, int] | None = None,
    out_window: tuple[int, int, int, int] | None = None,
    flip: bool = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """`tf.image.resize(image[window], size, method)` as float32, computed only at the output
    rows and columns of `out_window`.

    Args:
        image: [height, width, channels] (any real dtype; values are read as float32).
        size: `(height, width)` of the resized image.
        method: "bilinear" (half-pixel centres, TF2's) or "bilinear_tf1" (TF1's, without).
        window: `(top, left, height, width)` of `image` to resize (a crop); None: all of it.
        out_window: `(top, left, height, width)` of the resized image to return (a central
            crop); None: all of it.
        flip: resize the window mirrored left-right (as flipping it first would).
        out: a C-contiguous float32 array of the result's shape to write it into (a slot of
            a batch); None: a new array.

    Returns:
        float32 [out_window height, out_window width, channels] (`out` when given).

    Raises:
        ValueError: a method other than bilinear, an empty `window` or one not inside the
            image, an empty `out_window` or one not inside `size`, a wrong `out`.

    Example:
        >>> row = np.array([[[0.0], [10.0]]], np.float32)  # 1 x 2, one channel
        >>> resize_bilinear(row, (1, 4))[0, :, 0].tolist()  # x = (i + 0.5) / 2 - 0.5
        [0.0, 2.5, 7.5, 10.0]
    """
    if method not in RESIZE_METHODS:
        raise ValueError(f"method must be one of {RESIZE_METHODS}, got {method!r}")
    top, left, height, width = window or (0, 0, image.shape[0], image.shape[1])
    otop, oleft, oh, ow = out_window or (0, 0, size[0], size[1])
    # checked here: the column gathers below clip their indices, which are then all valid
    _check_inside("window", (top, left, height, width), image.shape[:2])
    _check_inside("out_window", (otop, oleft, oh, ow), size)
    channels = image.shape[2]
    if out is None:
        out = np.empty((oh, ow, channels), np.float32)
    elif out.shape != (oh, ow, channels) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 {(oh, ow, channels)}, got {out.shape}")
    half = method == "bilinear"
    ylo, yhi, ylerp = _weights(size[0], height, half_pixel=half, start=otop, count=oh)
    columns = _columns(size[1], width, half_pixel=half, start=oleft, count=ow, flip=flip,
                       channels=channels)  # fmt: skip
    along_x, upper_rows, lower_rows = _along_x(image, top, left, ylo, yhi, columns)
    f32 = np.float32
    # ... then along y: `upper + (lower - upper) * lerp` per output row, in place in `out`.
    result = out.reshape(oh, ow * channels)
    upper = np.take(along_x, upper_rows, axis=0, out=_SCRATCH.array("upper", result.shape, f32))
    np.take(along_x, lower_rows, axis=0, out=result)
    result -= upper
    result *= ylerp[:, None]
    result += upper
    return out


@functools.lru_cache(maxsize=4096)
def _columns(
    out_size: int,
    in_size: int,
    *,
    half_pixel: bool,
    start: int,
    count: int,
    flip: bool,
    channels: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(cols_lo, cols_hi, lerp)` of the x pass over rows flattened to [width * channels]:
    the flat column of each output value's left and right source pixel in a window at
    column 0 (mirrored with `flip`: column j of the mirrored window is column `in_size - 1
    - j`), and its interpolation weight repeated per channel. Cached and read-only, as
    `_weights` (a training crop's widths recur; building them cost a fifth of the x pass)."""
    xlo, xhi, xlerp = _weights(out_size, in_size, half_pixel=half_pixel, start=start, count=count)
    if flip:
        xlo, xhi = in_size - 1 - xlo, in_size - 1 - xhi
    per_channel = np.arange(channels)
    out = (
        (xlo[:, None] * channels + per_channel).ravel(),
        (xhi[:, None] * channels + per_channel).ravel(),
        np.repeat(xlerp, channels),
    )
    for array in out:
        array.flags.writeable = False
    return out


def _along_x(
    image: np.ndarray,
    top: int,
    left: int,
    ylo: np.ndarray,
    yhi: np.ndarray,
    columns: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(along_x, upper_rows, lower_rows)`: each source row an output row needs (`ylo`,
    `yhi` of the window at `top`) interpolated along x once (`columns`, `_columns`' of the
    window, shifted by `left`), as float32 [rows, out width * channels] in this thread's
    scratch, and the rows of it that `ylo` and `yhi` are.

    `left + (right - left) * lerp` with TensorFlow's roundings, each step one pass over
    same-typed float32 arrays (a pass mixing uint8 or int16 with float32 is buffered and
    several times slower). Rows are flattened to [width * channels] so NumPy's inner loops
    run along rows."""
    channels = image.shape[2]
    first, last = int(min(ylo[0], yhi[0])), int(max(ylo[-1], yhi[-1]))
    if last - first + 1 <= len(ylo) + len(yhi):  # nearly every row: a view, no gather
        band = image[top + first : top + last + 1]
        upper_rows, lower_rows = ylo - first, yhi - first
    else:  # a large reduction: only the rows used
        rows, where = np.unique(np.concatenate([ylo, yhi]), return_inverse=True)
        band = image[rows + top]
        upper_rows, lower_rows = where[: len(ylo)], where[len(ylo) :]
    band = band.reshape(len(band), -1)
    cols_lo, cols_hi, xlerp = columns
    if left:
        cols_lo, cols_hi = cols_lo + left * channels, cols_hi + left * channels
    shape = (len(band), len(cols_lo))
    along_x = _SCRATCH.array("along_x", shape, np.float32)
    step = _SCRATCH.array("step", shape, np.float32)
    # mode="clip": the window is inside the image (`resize_bilinear` checks), so every column
    # is valid and nothing is clipped; it skips "raise"'s check per value (a twelfth faster)
    if band.dtype == np.float32:
        np.take(band, cols_lo, axis=1, out=along_x, mode="clip")
        np.take(band, cols_hi, axis=1, out=step, mode="clip")
    else:
        gathered = _SCRATCH.array("gathered", shape, band.dtype)
        np.take(band, cols_lo, axis=1, out=gathered, mode="clip")
        np.copyto(along_x, gathered, casting="unsafe")
        np.take(band, cols_hi, axis=1, out=gathered, mode="clip")
        np.copyto(step, gathered, casting="unsafe")
    step -= along_x
    step *= xlerp
    along_x += step
    return along_x, upper_rows, lower_rows


# ---- evaluation ---------------------------------------------------------------------------


def eval_image(
    image: np.ndarray, *, image_size: int, preprocessing: ImagePreprocessing | None = None
) -> np.ndarray:
    """The evaluation view of a decoded image, `preprocessing.eval_view`'s: float32
    [image_size, image_size, 3] in [0, 255], not yet scaled.

    "center_crop": the shorter side to `round(image_size / crop_fraction)` (the longer
    one `round(side * scale)` in float32, ties to even as `tf.round`), the central crop
    (offsets rounded down); "crop_then_resize": `tf.image.central_crop`'s window
    (`int((side - side * fraction) / 2)` in float32), resized to a square.

    Example:
        >>> eval_image(np.zeros((300, 400, 3), np.uint8), image_size=224).shape
        (224, 224, 3)
    """
    p = supported_preprocessing(preprocessing)
    h, w = image.shape[:2]
    if p.eval_crop == "crop_then_resize":
        sides = np.array([h, w], np.float32)
        start = ((sides - sides * np.float32(p.crop_fraction)) / np.float32(2)).astype(np.int64)
        window = (int(start[0]), int(start[1]), h - 2 * int(start[0]), w - 2 * int(start[1]))
        return resize_bilinear(
            image, (image_size, image_size), method=p.resize_method, window=window
        )
    sides = np.array([h, w], np.float32)
    scale = np.float32(p.eval_resize_size(image_size)) / sides.min()
    new_h, new_w = (int(v) for v in np.round(sides * scale))
    top, left = (new_h - image_size) // 2, (new_w - image_size) // 2
    return resize_bilinear(
        image,
        (new_h, new_w),
        method=p.resize_method,
        out_window=(top, left, image_size, image_size),
    )


# ---- training -----------------------------------------------------------------------------


def _crop_attempt(
    width: int, height: int, min_rel: float, max_rel: float, aspect: float, rng: np.random.Generator
) -> tuple[int, int, int, int] | None:
    """`GenerateRandomCrop` of `sample_distorted_bounding_box_op.cc`: `(y, x, h, w)` or None."""
    f32 = np.float32
    min_area = f32(f32(min_rel) * width) * height
    max_area = f32(f32(max_rel) * width) * height
    aspect = f32(aspect)
    h = int(np.rint(np.sqrt(min_area / aspect)))
    max_h = int(np.rint(np.sqrt(max_area / aspect)))
    if int(np.rint(f32(max_h) * aspect)) > width:
        max_h = int((width + 0.5 - 1e-7) / aspect)
        if int(np.rint(f32(max_h) * aspect)) > width:
            max_h -= 1
    max_h = min(max_h, height)
    h = min(h, max_h)
    if h < max_h:
        h += int(rng.integers(max_h - h + 1))
    w = int(np.rint(f32(h) * aspect))
    area = w * h
    if area < min_area:
        h += 1
        w = int(np.rint(f32(h) * aspect))
        area = w * h
    if area > max_area:
        h -= 1
        w = int(np.rint(f32(h) * aspect))
        area = w * h
    if area < min_area or area > max_area or w > width or h > height or w <= 0 or h <= 0:
        return None
    y = int(rng.integers(height - h)) if h < height else 0
    x = int(rng.integers(width - w)) if w < width else 0
    return y, x, h, w


def _covers(window: tuple[int, int, int, int], boxes: np.ndarray, minimum: float) -> bool:
    y, x, h, w = window
    for ymin, xmin, ymax, xmax in boxes:
        area = (ymax - ymin) * (xmax - xmin)
        if area <= 0:
            continue
        iy = max(0, min(ymax, y + h) - max(ymin, y))
        ix = max(0, min(xmax, x + w) - max(xmin, x))
        if iy * ix / area >= minimum:
            return True
    return False


def random_crop_window(
    height: int,
    width: int,
    *,
    boxes: np.ndarray | None = None,
    rng: np.random.Generator,
    preprocessing: ImagePreprocessing | None = None,
) -> tuple[int, int, int, int]:
    """A training crop `(top, left, height, width)` by `sample_distorted_bounding_box`'s rule.

    Args:
        height, width: the image's size.
        boxes: float32 [n, 4] normalized `[ymin, xmin, ymax, xmax]`; None or empty: the whole
            image is the box (`use_image_if_no_bounding_boxes=True`).
        rng: the draw's random numbers.
        preprocessing: `aspect_ratio_range`, `area_range`, `min_object_covered`,
            `max_attempts`; None: the defaults.

    Example:
        >>> window = random_crop_window(375, 500, rng=np.random.default_rng(0))
        >>> top, left, h, w = window
        >>> 0.1 <= h * w / (375 * 500) <= 1.0 and 0 <= top <= 375 - h and 0 <= left <= 500 - w
        True
    """
    p = ImagePreprocessing() if preprocessing is None else preprocessing
    if boxes is None or len(boxes) == 0:
        pixel_boxes = [(0, 0, height, width)]
    else:  # the op truncates each normalized coordinate times the side to an int
        pixel_boxes = [
            (int(b[0] * height), int(b[1] * width), int(b[2] * height), int(b[3] * width))
            for b in np.asarray(boxes, np.float32)
        ]
    lo, hi = p.aspect_ratio_range
    for _ in range(p.max_attempts):
        aspect = np.float32(rng.random(dtype=np.float32)) * np.float32(hi - lo) + np.float32(lo)
        window = _crop_attempt(width, height, *p.area_range, float(aspect), rng)
        if window is not None and _covers(window, pixel_boxes, p.min_object_covered):
            return window
    return 0, 0, height, width


def train_image(
    image: np.ndarray,
    *,
    image_size: int,
    window: tuple[int, int, int, int],
    flip: bool,
    preprocessing: ImagePreprocessing | None = None,
    out: np.ndarray | None = None,
    scaled: bool = False,
) -> np.ndarray:
    """The crop `window` of a decoded image, mirrored when `flip` (and the recipe flips),
    resized to `image_size` square: float32 [image_size, image_size, 3] in [0, 255], written
    into `out` when given (C-contiguous float32 of that shape). With `scaled`, then
    `scale_input`'s float32 values (the same arithmetic, in place: the training example).

    Flipping before a half-pixel-centred resize is the same as mirroring the resize's
    column indices, which is what this does (no copy); for "bilinear_tf1" (not symmetric)
    the resized image is mirrored, as nvcnn flips after resizing.
    """
    p = supported_preprocessing(preprocessing)
    flip = flip and p.flip
    size = (image_size, image_size)
    if p.resize_method == "bilinear":
        result = resize_bilinear(image, size, window=window, flip=flip, out=out)
    elif not flip:
        result = resize_bilinear(image, size, method=p.resize_method, window=window, out=out)
    else:
        resized = resize_bilinear(image, size, method=p.resize_method, window=window)
        result = np.empty_like(resized) if out is None else out
        np.copyto(result, resized[:, ::-1])
    if not scaled:
        return result
    if p.quantize_uint8:  # truncated to uint8 first: scale_input's own path
        np.copyto(result, scale_input(result, preprocessing=p))
    else:
        _scale_rows(result, p, out=result)
    return result


def decode_and_random_crop(
    data: bytes,
    *,
    image_size: int,
    rng: np.random.Generator,
    boxes: np.ndarray | None = None,
    preprocessing: ImagePreprocessing | None = None,
    scaled: bool = False,
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Decodes an image and draws its training crop: `(image, window)` for `train_image`.

    With `scaled` and a JPEG whose crop is at least twice `image_size` on its shorter side,
    libjpeg-turbo decodes at a reduced scale (1/2, 3/8, ... in the DCT domain: fewer pixels
    to decode and to resize; `simplejpeg.decode_jpeg(min_height=, min_width=)`) and the
    window is mapped onto the smaller image. The window is drawn from the full size before
    decoding either way, so the same generator gives the same crop and flip in both modes;
    the pixels differ (the scaled IDCT averages where the full-size resize samples).
    """
    p = ImagePreprocessing() if preprocessing is None else preprocessing
    if scaled and is_jpeg(data):
        import simplejpeg

        try:
            height, width = simplejpeg.decode_jpeg_header(data)[:2]
        except ValueError:
            height = width = 0
        if height and width:
            window = random_crop_window(height, width, boxes=boxes, rng=rng, preprocessing=p)
            factor = image_size / min(window[2], window[3])
            if factor <= 0.5:
                return _scaled_decode(data, window, factor, (height, width), p)
            return decode_image(data, preprocessing=p), window
    image = decode_image(data, preprocessing=p)
    height, width = image.shape[:2]
    window = random_crop_window(height, width, boxes=boxes, rng=rng, preprocessing=p)
    return image, window


def _scaled_decode(
    data: bytes,
    window: tuple[int, int, int, int],
    factor: float,
    shape: tuple[int, int],
    p: ImagePreprocessing,
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    import simplejpeg

    try:
        image = simplejpeg.decode_jpeg(
            data,
            colorspace="RGB",
            fastdct=p.dct_method in ("", "INTEGER_FAST"),
            fastupsample=not p.fancy_upscaling,
            min_height=math.ceil(shape[0] * factor),
            min_width=math.ceil(shape[1] * factor),
        )
    except ValueError:  # what simplejpeg refuses, Pillow decodes at full size
        return decode_image(data, preprocessing=p), window
    fy, fx = image.shape[0] / shape[0], image.shape[1] / shape[1]
    top, left = math.floor(window[0] * fy), math.floor(window[1] * fx)
    height = max(1, min(image.shape[0] - top, round(window[2] * fy)))
    width = max(1, min(image.shape[1] - left, round(window[3] * fx)))
    return image, (top, left, height, width)


def scale_input(
    image: np.ndarray,
    *,
    preprocessing: ImagePreprocessing | None = None,
    dtype: str = "float32",
    overwrite: bool = False,
) -> np.ndarray:
    """`preprocessing.scale_input` in NumPy float32: "mean_std" `image * (1 / std) +
    (-mean / std)` (the tf.data path's formula and order), "inception" `image * (1 / 127.5)
    - 1`; with `quantize_uint8` of the image clipped to [0, 255] and truncated to uint8 first.
    Returned as `dtype` ('float32', 'bfloat16' through ml_dtypes, 'float16'). `overwrite`:
    a C-contiguous float32 `image` may be scaled in place (the pipeline's own views).

    Example:
        >>> [round(float(v), 4) for v in scale_input(np.full((1, 1, 3), 255.0, np.float32))[0, 0]]
        [2.2488, 2.4286, 2.6395]
    """
    p = ImagePreprocessing() if preprocessing is None else preprocessing
    f32 = np.float32
    if p.quantize_uint8:
        image = np.clip(image.astype(f32), 0.0, 255.0).astype(np.uint8)
    image = image.astype(f32, copy=False)
    in_place = overwrite and image.dtype == f32 and image.flags.c_contiguous
    out = image if in_place else np.empty(image.shape, f32)
    _scale_rows(image, p, out=out)
    return as_dtype(out, dtype)


def _scale_rows(image: np.ndarray, p: ImagePreprocessing, *, out: np.ndarray) -> None:
    """`scale_input`'s arithmetic (no `quantize_uint8`) of float32 `image` into the
    C-contiguous float32 `out` (`image` itself: in place). Rows are flattened and the
    per-channel vectors tiled along them, so NumPy's inner loop runs over a whole row, not
    over 3 channels (the same products and sums)."""
    f32 = np.float32
    if p.input_scaling == "inception":
        np.multiply(image, f32(1.0 / 127.5), out=out)
        out -= f32(1.0)
        return
    width = image.shape[-2] * 3 if image.ndim >= 2 else image.shape[-1]
    flat = out.reshape(-1, width)
    scale, offset = _scale_vectors(tuple(p.mean), tuple(p.std), width // 3)
    np.multiply(image.reshape(-1, width), scale, out=flat)
    flat += offset


@functools.lru_cache(maxsize=64)
def _scale_vectors(
    mean: tuple[float, ...], std: tuple[float, ...], reps: int
) -> tuple[np.ndarray, np.ndarray]:
    """`(1 / std, -mean / std)` in float32, tiled `reps` times (read-only, cached)."""
    scale = np.float32(1.0) / np.asarray(std, np.float32)
    offset = -np.asarray(mean, np.float32) * scale
    out = np.tile(scale, reps), np.tile(offset, reps)
    for array in out:
        array.flags.writeable = False
    return out


def as_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` as the named float dtype ('float32', 'float16', 'bfloat16')."""
    if dtype == "bfloat16":
        import ml_dtypes

        return array.astype(ml_dtypes.bfloat16)
    return array.astype(np.dtype(dtype), copy=False)
