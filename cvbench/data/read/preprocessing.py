"""ImageNet preprocessing as pure TensorFlow functions: encoded bytes in, normalized image out.

The NVIDIA ResNet-50 v1.5 recipe:

* train: a random crop from `sample_distorted_bounding_box(min_object_covered=0.1,
  aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0), max_attempts=100,
  use_image_if_no_bounding_boxes=True)`, *fused with JPEG decoding*
  (`decode_and_crop_jpeg` decodes only the crop's rows and columns); bilinear resize to
  `image_size`; random left-right flip (applied to the crop, before resizing, as NVIDIA's
  scripts do; the two orders agree up to float rounding);
* eval: shorter side to `image_size / 0.875` (256 for 224) keeping aspect ratio, central
  `image_size` crop;
* both: `(pixel - mean) / std` per RGB channel with mean (123.68, 116.28, 103.53) and std
  (58.395, 57.12, 57.385) (`MEAN_RGB`, `STD_RGB`, from `cvbench.data.read.channel_means`),
  channels last. Pixel values 0..255 therefore map to
  [-123.68 / 58.395, (255 - 103.53) / 57.385] = [-2.1180, 2.6395].

Randomness is stateless: the caller passes a seed tensor of shape [2] per image, so the same
seed gives the same crop and flip (deterministic pipelines, parallel maps included).

Boxes are float32 `[num_boxes, 4]` as normalized `[ymin, xmin, ymax, xmax]`; zero boxes means
"the whole image" (`use_image_if_no_bounding_boxes`).

Non-JPEG bytes (PNG, GIF, BMP) are decoded whole and cropped; only JPEG takes the fused path.

Every knob of this recipe is a field of `ImagePreprocessing`
(`cvbench.data.read.image_preprocessing`, re-exported here), whose defaults are the values
above: the crop ranges, the evaluation crop ("center_crop" above, or nvcnn's
"crop_then_resize": the model file's resize rules), the input scaling ("mean_std" above, or
"inception": `x / 127.5 - 1`), the resize method, the flip, the JPEG decoder options and
nvcnn's uint8 rounding.
`preprocess_for_train` / `preprocess_for_eval` take one as `preprocessing=`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from cvbench.data.read.channel_means import IMAGENET_MEAN_RGB, IMAGENET_STD_RGB
from cvbench.data.read.image_preprocessing import ImagePreprocessing

MEAN_RGB = IMAGENET_MEAN_RGB
STD_RGB = IMAGENET_STD_RGB
DEFAULT = ImagePreprocessing()  # the recipe described above
EVAL_CROP_FRACTION = DEFAULT.crop_fraction  # 0.875 = 224 / 256

MIN_OBJECT_COVERED = DEFAULT.min_object_covered  # 0.1
ASPECT_RATIO_RANGE = DEFAULT.aspect_ratio_range  # (0.75, 1.33)
AREA_RANGE = DEFAULT.area_range  # (0.05, 1.0)
MAX_ATTEMPTS = DEFAULT.max_attempts  # 100

# The JPEG decoder options of NVIDIA's TensorFlow scripts: the fast integer IDCT (which is
# TensorFlow's default anyway) and no interpolation of the chroma planes. DLE
# `TensorFlow/Classification/ConvNets/utils/image_processing.py` lines 48-49 (`_decode_jpeg`,
# which `preprocess_image_record` uses for training and evaluation); nvcnn_hvd.py v1.1
# `decode_jpeg`. The pipelines keep TensorFlow's defaults unless
# `ImagePreprocessing(dct_method=..., fancy_upscaling=...)` says otherwise; the input
# benchmark measures both.
NVIDIA_JPEG_OPTIONS = {"dct_method": "INTEGER_FAST", "fancy_upscaling": False}


def _check(preprocessing: ImagePreprocessing | None) -> ImagePreprocessing:
    if preprocessing is None:
        return DEFAULT
    if not isinstance(preprocessing, ImagePreprocessing):
        raise ValueError(
            f"preprocessing must be an ImagePreprocessing or None, got {preprocessing!r}"
        )
    return preprocessing


def normalize(
    image: tf.Tensor,
    dtype: Any = tf.float32,
    *,
    mean: tuple[float, float, float] = MEAN_RGB,
    std: tuple[float, float, float] = STD_RGB,
) -> tf.Tensor:
    """`(image - mean) / std` (default `MEAN_RGB`, `STD_RGB`), in float32, returned as `dtype`.

    Computed as `image * (1 / std) + (-mean / std)`. For a statically shaped image the two
    per-channel vectors are expanded to full-size constants first: TensorFlow's CPU kernels
    broadcast a [3] vector along the innermost axis several times slower than they apply an
    element-wise op, and this step would otherwise cost as much as the JPEG decode.

    Args:
        image: [..., 3] RGB pixels in 0..255 (any real or integer dtype).
        dtype: the output dtype.
        mean: per-channel RGB means.
        std: per-channel RGB standard deviations.
    """
    image = tf.cast(image, tf.float32)
    scale = 1.0 / np.asarray(std, np.float32)
    offset = -np.asarray(mean, np.float32) * scale
    if image.shape.is_fully_defined():
        scale = np.broadcast_to(scale, image.shape)
        offset = np.broadcast_to(offset, image.shape)
    return tf.cast(image * tf.constant(scale) + tf.constant(offset), dtype)


def quantize(image: tf.Tensor, preprocessing: ImagePreprocessing) -> tf.Tensor:
    """With `preprocessing.quantize_uint8`: `image` clipped to [0, 255] and cast to uint8
    (truncating, nvcnn's images); otherwise `image` as it is."""
    if not preprocessing.quantize_uint8:
        return image
    return tf.cast(tf.clip_by_value(tf.cast(image, tf.float32), 0.0, 255.0), tf.uint8)


def scale_input(
    image: tf.Tensor, preprocessing: ImagePreprocessing, dtype: Any = tf.float32
) -> tf.Tensor:
    """The input scaling of `preprocessing`: "mean_std" `normalize(image, mean, std)`, or
    "inception" `image * (1 / 127.5) - 1` (nvcnn's formula: 0 -> -1, 255 -> 1), computed in
    float32 and returned as `dtype`; with `quantize_uint8`, of the image clipped to [0, 255]
    and cast to uint8 first (truncating, nvcnn's images).

    Args:
        image: [..., 3] RGB pixels in 0..255.
        preprocessing: the recipe (`input_scaling`, `mean`, `std`).
        dtype: the output dtype.
    """
    image = quantize(image, preprocessing)
    if preprocessing.input_scaling == "inception":
        return tf.cast(tf.cast(image, tf.float32) * (1.0 / 127.5) - 1.0, dtype)
    return normalize(image, dtype, mean=preprocessing.mean, std=preprocessing.std)


def resize(image: tf.Tensor, size: Any, method: str = "bilinear") -> tf.Tensor:
    """`tf.image.resize(image, size, method)`, or for "bilinear_tf1" TF1's bilinear resize
    without half-pixel centres (`ResizeBilinear(align_corners=False,
    half_pixel_centers=False)`, what `tf.compat.v1.image.resize_images` does). Returns
    float32 [height, width, channels] (or a batch of them for a batch).
    """
    if method == "bilinear_tf1":
        single = image.shape.rank == 3
        batch = tf.cast(image[tf.newaxis] if single else image, tf.float32)
        out = tf.raw_ops.ResizeBilinear(
            images=batch, size=size, align_corners=False, half_pixel_centers=False
        )
        return out[0] if single else out
    return tf.image.resize(image, size, method=method)


def _decode_any(image_bytes: tf.Tensor) -> tf.Tensor:
    image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def _decode(image_bytes: tf.Tensor, preprocessing: ImagePreprocessing) -> tf.Tensor:
    # TensorFlow's default JPEG options: `decode_image` (what this pipeline always ran);
    # otherwise JPEGs go through `decode_jpeg` with the options, other formats as before.
    if preprocessing.default_jpeg_decoding:
        return _decode_any(image_bytes)

    def jpeg() -> tf.Tensor:
        return tf.io.decode_jpeg(
            image_bytes,
            channels=3,
            dct_method=preprocessing.dct_method,
            fancy_upscaling=preprocessing.fancy_upscaling,
        )

    image = tf.cond(tf.io.is_jpeg(image_bytes), jpeg, lambda: _decode_any(image_bytes))
    image.set_shape([None, None, 3])
    return image


def random_crop_window(
    image_shape: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    preprocessing: ImagePreprocessing | None = None,
) -> tf.Tensor:
    """A random crop window `[offset_y, offset_x, height, width]` (int32) for one image.

    Args:
        image_shape: [3] or [2] int (height, width, ...).
        boxes: float32 [num_boxes, 4] normalized `[ymin, xmin, ymax, xmax]`.
        seed: [2] int32/int64.
        preprocessing: the crop ranges (`aspect_ratio_range`, `area_range`,
            `min_object_covered`, `max_attempts`); None: the defaults (NVIDIA's).
    """
    p = _check(preprocessing)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        image_size=image_shape,
        bounding_boxes=tf.reshape(tf.cast(boxes, tf.float32), [1, -1, 4]),
        seed=seed,
        min_object_covered=p.min_object_covered,
        aspect_ratio_range=p.aspect_ratio_range,
        area_range=p.area_range,
        max_attempts=p.max_attempts,
        use_image_if_no_bounding_boxes=True,
    )
    return tf.cast(tf.stack([begin[0], begin[1], size[0], size[1]]), tf.int32)


def _crop(image: tf.Tensor, window: tf.Tensor) -> tf.Tensor:
    return tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])


def _jpeg_options(
    preprocessing: ImagePreprocessing, dct_method: str | None, fancy_upscaling: bool | None
) -> tuple[str, bool]:
    dct = preprocessing.dct_method if dct_method is None else dct_method
    fancy = preprocessing.fancy_upscaling if fancy_upscaling is None else fancy_upscaling
    return dct, fancy


def decode_and_random_crop(
    image_bytes: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    dct_method: str | None = None,
    fancy_upscaling: bool | None = None,
    preprocessing: ImagePreprocessing | None = None,
) -> tf.Tensor:
    """Decodes only a random crop of the image (fused for JPEG). Returns uint8 [h, w, 3].

    Args:
        image_bytes: scalar string, an encoded image.
        boxes: float32 [num_boxes, 4] normalized `[ymin, xmin, ymax, xmax]` (may be empty).
        seed: [2] int, the crop's random seed.
        dct_method: the JPEG decoder's IDCT; None: `preprocessing.dct_method`.
        fancy_upscaling: the JPEG decoder's chroma interpolation; None:
            `preprocessing.fancy_upscaling` (NVIDIA's scripts use `NVIDIA_JPEG_OPTIONS`).
        preprocessing: the crop ranges and decoder options; None: the defaults.
    """
    p = _check(preprocessing)
    dct, fancy = _jpeg_options(p, dct_method, fancy_upscaling)

    def fused() -> tf.Tensor:
        shape = tf.image.extract_jpeg_shape(image_bytes)
        window = random_crop_window(shape, boxes, seed, preprocessing=p)
        return tf.image.decode_and_crop_jpeg(
            image_bytes, window, channels=3, dct_method=dct, fancy_upscaling=fancy
        )

    def whole() -> tf.Tensor:
        image = _decode_any(image_bytes)
        return _crop(image, random_crop_window(tf.shape(image), boxes, seed, preprocessing=p))

    image = tf.cond(tf.io.is_jpeg(image_bytes), fused, whole)
    image.set_shape([None, None, 3])
    return image


def decode_then_random_crop(
    image_bytes: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    dct_method: str | None = None,
    fancy_upscaling: bool | None = None,
    preprocessing: ImagePreprocessing | None = None,
) -> tf.Tensor:
    """The unfused reference: decodes the whole image, then crops (same window as the fused
    path for the same seed, same JPEG decoder options; arguments as
    `decode_and_random_crop`). Returns uint8 [h, w, 3]."""
    p = _check(preprocessing)
    dct, fancy = _jpeg_options(p, dct_method, fancy_upscaling)

    def jpeg() -> tf.Tensor:
        return tf.io.decode_jpeg(image_bytes, channels=3, dct_method=dct, fancy_upscaling=fancy)

    image = tf.cond(tf.io.is_jpeg(image_bytes), jpeg, lambda: _decode_any(image_bytes))
    image.set_shape([None, None, 3])
    return _crop(image, random_crop_window(tf.shape(image), boxes, seed, preprocessing=p))


def _train_from_crop(
    crop: tf.Tensor,
    seed: tf.Tensor,
    image_size: int,
    dtype: Any,
    preprocessing: ImagePreprocessing = DEFAULT,
) -> tf.Tensor:
    # Flip the uint8 crop, then resize (the order of NVIDIA's DLE scripts): bilinear resizing
    # with half-pixel centres commutes with mirroring, and reversing uint8 rows costs less
    # than reversing the float32 output. Casting to float32 first is not a change of result
    # (the resize computes in float32 either way) but TensorFlow's CPU kernel resizes float32
    # input faster than uint8. TF1's bilinear resize ("bilinear_tf1") does not commute with
    # mirroring: there the flip follows the resize, as in nvcnn.
    p = preprocessing
    flip_first = p.flip and p.resize_method != "bilinear_tf1"
    if flip_first:
        crop = tf.image.stateless_random_flip_left_right(crop, seed)
    image = resize(tf.cast(crop, tf.float32), [image_size, image_size], p.resize_method)
    if p.flip and not flip_first:
        image = tf.image.stateless_random_flip_left_right(image, seed)
    return scale_input(image, p, dtype)


def preprocess_for_train(
    image_bytes: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    image_size: int = 224,
    dtype: Any = tf.float32,
    preprocessing: ImagePreprocessing | None = None,
) -> tf.Tensor:
    """Training preprocessing, crop fused with JPEG decoding (NVIDIA ResNet-50 v1.5 by default).

    Args:
        image_bytes: scalar string, an encoded image.
        boxes: float32 [num_boxes, 4] normalized `[ymin, xmin, ymax, xmax]` (may be empty).
        seed: [2] int, the image's random seed.
        image_size: output height and width.
        dtype: output dtype.
        preprocessing: the recipe's knobs (crop ranges, resize method, flip, scaling, JPEG
            decoder options); None: the defaults (the module docstring's recipe).

    Returns:
        [image_size, image_size, 3] scaled RGB, `dtype`.

    Raises:
        ValueError: `preprocessing` is not an `ImagePreprocessing`.
    """
    p = _check(preprocessing)
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    crop = decode_and_random_crop(image_bytes, boxes, crop_seed, preprocessing=p)
    return _train_from_crop(crop, flip_seed, image_size, dtype, p)


def preprocess_for_train_reference(
    image_bytes: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    image_size: int = 224,
    dtype: Any = tf.float32,
    preprocessing: ImagePreprocessing | None = None,
) -> tf.Tensor:
    """`preprocess_for_train` with the whole image decoded before cropping (the baseline the
    input benchmark compares against). Same crop and flip for the same seed."""
    p = _check(preprocessing)
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    crop = decode_then_random_crop(image_bytes, boxes, crop_seed, preprocessing=p)
    return _train_from_crop(crop, flip_seed, image_size, dtype, p)


def resize_shorter_side(image: tf.Tensor, size: int, method: str = "bilinear") -> tf.Tensor:
    """Resize (default bilinear) so the shorter side is `size`, keeping the aspect ratio.

    The longer side is rounded to the nearest pixel: a 375 x 500 image with size 256 becomes
    256 x 341 (500 * 256 / 375 = 341.33). `method` as `resize`. Returns float32. `image`:
    `(H, W, C)` or a batch `(B, H, W, C)` (all of one size).
    """
    sides = tf.cast(tf.shape(image)[-3:-1], tf.float32)
    scale = tf.cast(size, tf.float32) / tf.reduce_min(sides)
    # the shorter side's round(side * size / side) is `size` exactly (float32 error < 0.5 up
    # to 2**20 pixels); no tf.where, which tf2onnx converts into a Resize ONNX cannot load
    return resize(image, tf.cast(tf.round(sides * scale), tf.int32), method)


def central_crop(image: tf.Tensor, size: int) -> tf.Tensor:
    """The central `size` x `size` crop (offsets rounded down) of `(H, W, C)` or of each
    image of a batch `(B, H, W, C)`."""
    shape = tf.shape(image)
    top = (shape[-3] - size) // 2
    left = (shape[-2] - size) // 2
    return image[..., top : top + size, left : left + size, :]


def central_fraction_crop(image: tf.Tensor, fraction: float) -> tf.Tensor:
    """The central `fraction` of each side, `tf.image.central_crop(image, fraction)`'s
    window (`start = int((side - side * fraction) / 2)`, `size = side - 2 * start`) computed
    in float32 where TensorFlow uses float64, which TFLite has no kernels for. The two agree
    at 0.875 (`side * 0.875` is exact in float32 below 2**21 pixels) and at 1.0; at other
    fractions float32 rounding can move a window by one pixel for some sides. `image`:
    `(H, W, C)` or a batch `(B, H, W, C)` (one window for all)."""
    sides_int = tf.shape(image)[-3:-1]
    sides = tf.cast(sides_int, tf.float32)
    start = tf.cast((sides - sides * fraction) / 2, tf.int32)
    end = sides_int - start
    return image[..., start[0] : end[0], start[1] : end[1], :]


def eval_resize_size(image_size: int, crop_fraction: float = EVAL_CROP_FRACTION) -> int:
    """The shorter side evaluation resizes to: `round(image_size / crop_fraction)`
    (224 -> 256 with the default 0.875)."""
    return round(image_size / crop_fraction)


def preprocess_for_eval(
    image_bytes: tf.Tensor,
    *,
    image_size: int = 224,
    dtype: Any = tf.float32,
    preprocessing: ImagePreprocessing | None = None,
) -> tf.Tensor:
    """Evaluation preprocessing: by default shorter side to `image_size / 0.875`, central crop.

    With `preprocessing.eval_crop="crop_then_resize"`: `central_fraction_crop(image,
    crop_fraction)` (`tf.image.central_crop`'s window: offsets
    `int((side - side * crop_fraction) / 2)`, the aspect ratio kept), then resized to
    `image_size` x `image_size` (the aspect ratio not kept), nvcnn's evaluation.

    Args:
        image_bytes: scalar string, an encoded image.
        image_size: output height and width.
        dtype: output dtype.
        preprocessing: the recipe's knobs (evaluation crop and fraction, resize method,
            scaling, JPEG decoder options); None: the defaults.

    Returns:
        [image_size, image_size, 3] scaled RGB, `dtype`.

    Raises:
        ValueError: `preprocessing` is not an `ImagePreprocessing`.
    """
    p = _check(preprocessing)
    image = eval_view(_decode(image_bytes, p), image_size=image_size, preprocessing=p)
    return scale_input(image, p, dtype)


def eval_view(
    image: tf.Tensor, *, image_size: int, preprocessing: ImagePreprocessing | None = None
) -> tf.Tensor:
    """The evaluation crop and resize of `preprocess_for_eval` on a decoded image (also what
    a serving export does in its graph): `(H, W, 3)` RGB `[0, 255]`, any dtype, ->
    `(image_size, image_size, 3)` float32 `[0, 255]`, not yet scaled. A batch
    `(B, H, W, 3)` of one size gets each image's view (the same ops, batched).

    Example:
        >>> view = eval_view(tf.zeros([300, 400, 3], tf.uint8), image_size=224)
        >>> view.shape.as_list(), view.dtype.name
        ([224, 224, 3], 'float32')
    """
    p = _check(preprocessing)
    # float32 first (the same values: the resize computes in float32) and a reshape as the
    # shape check: TFLite has built-in kernels for these, none for EnsureShape or a resize
    # from uint8 to float32
    if p.eval_crop == "crop_then_resize":
        image = tf.cast(central_fraction_crop(image, p.crop_fraction), tf.float32)
        image = resize(image, [image_size, image_size], p.resize_method)
    else:
        image = tf.cast(image, tf.float32)
        image = resize_shorter_side(image, p.eval_resize_size(image_size), p.resize_method)
        image = central_crop(image, image_size)
    return tf.reshape(image, [-1, image_size, image_size, 3][4 - image.shape.rank :])
