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
  (58.395, 57.12, 57.385) (`MEAN_RGB`, `STD_RGB`, from `cvbench.data.channel_means`),
  channels last. Pixel values 0..255 therefore map to
  [-123.68 / 58.395, (255 - 103.53) / 57.385] = [-2.1180, 2.6395].

Randomness is stateless: the caller passes a seed tensor of shape [2] per image, so the same
seed gives the same crop and flip (deterministic pipelines, parallel maps included).

Boxes are float32 `[num_boxes, 4]` as normalized `[ymin, xmin, ymax, xmax]`; zero boxes means
"the whole image" (`use_image_if_no_bounding_boxes`).

Non-JPEG bytes (PNG, GIF, BMP) are decoded whole and cropped; only JPEG takes the fused path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from cvbench.data.channel_means import IMAGENET_MEAN_RGB, IMAGENET_STD_RGB

MEAN_RGB = IMAGENET_MEAN_RGB
STD_RGB = IMAGENET_STD_RGB
EVAL_CROP_FRACTION = 0.875  # 224 / 256

MIN_OBJECT_COVERED = 0.1
ASPECT_RATIO_RANGE = (0.75, 1.33)
AREA_RANGE = (0.05, 1.0)
MAX_ATTEMPTS = 100

# The JPEG decoder options of NVIDIA's TensorFlow scripts (faster integer IDCT, no
# interpolation of the chroma planes). The pipelines here keep TensorFlow's defaults; the
# input benchmark measures both.
NVIDIA_JPEG_OPTIONS = {"dct_method": "INTEGER_FAST", "fancy_upscaling": False}


def normalize(image: tf.Tensor, dtype: Any = tf.float32) -> tf.Tensor:
    """`(image - MEAN_RGB) / STD_RGB`, computed in float32, returned as `dtype`.

    Computed as `image * (1 / std) + (-mean / std)`. For a statically shaped image the two
    per-channel vectors are expanded to full-size constants first: TensorFlow's CPU kernels
    broadcast a [3] vector along the innermost axis several times slower than they apply an
    element-wise op, and this step would otherwise cost as much as the JPEG decode.

    Args:
        image: [..., 3] RGB pixels in 0..255 (any real or integer dtype).
        dtype: the output dtype.
    """
    image = tf.cast(image, tf.float32)
    scale = 1.0 / np.asarray(STD_RGB, np.float32)
    offset = -np.asarray(MEAN_RGB, np.float32) * scale
    if image.shape.is_fully_defined():
        scale = np.broadcast_to(scale, image.shape)
        offset = np.broadcast_to(offset, image.shape)
    return tf.cast(image * tf.constant(scale) + tf.constant(offset), dtype)


def _decode_any(image_bytes: tf.Tensor) -> tf.Tensor:
    image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def random_crop_window(image_shape: tf.Tensor, boxes: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """A random crop window `[offset_y, offset_x, height, width]` (int32) for one image.

    Args:
        image_shape: [3] or [2] int (height, width, ...).
        boxes: float32 [num_boxes, 4] normalized `[ymin, xmin, ymax, xmax]`.
        seed: [2] int32/int64.
    """
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        image_size=image_shape,
        bounding_boxes=tf.reshape(tf.cast(boxes, tf.float32), [1, -1, 4]),
        seed=seed,
        min_object_covered=MIN_OBJECT_COVERED,
        aspect_ratio_range=ASPECT_RATIO_RANGE,
        area_range=AREA_RANGE,
        max_attempts=MAX_ATTEMPTS,
        use_image_if_no_bounding_boxes=True,
    )
    return tf.cast(tf.stack([begin[0], begin[1], size[0], size[1]]), tf.int32)


def _crop(image: tf.Tensor, window: tf.Tensor) -> tf.Tensor:
    return tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])


def decode_and_random_crop(
    image_bytes: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    dct_method: str = "",
    fancy_upscaling: bool = True,
) -> tf.Tensor:
    """Decodes only a random crop of the image (fused for JPEG). Returns uint8 [h, w, 3].

    `dct_method` and `fancy_upscaling` are passed to the JPEG decoder (TensorFlow's defaults;
    NVIDIA's scripts use `NVIDIA_JPEG_OPTIONS`).
    """

    def fused() -> tf.Tensor:
        shape = tf.image.extract_jpeg_shape(image_bytes)
        window = random_crop_window(shape, boxes, seed)
        return tf.image.decode_and_crop_jpeg(
            image_bytes,
            window,
            channels=3,
            dct_method=dct_method,
            fancy_upscaling=fancy_upscaling,
        )

    def whole() -> tf.Tensor:
        image = _decode_any(image_bytes)
        return _crop(image, random_crop_window(tf.shape(image), boxes, seed))

    image = tf.cond(tf.io.is_jpeg(image_bytes), fused, whole)
    image.set_shape([None, None, 3])
    return image


def decode_then_random_crop(
    image_bytes: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    dct_method: str = "",
    fancy_upscaling: bool = True,
) -> tf.Tensor:
    """The unfused reference: decodes the whole image, then crops (same window as the fused
    path for the same seed, same JPEG decoder options). Returns uint8 [h, w, 3]."""

    def jpeg() -> tf.Tensor:
        return tf.io.decode_jpeg(
            image_bytes, channels=3, dct_method=dct_method, fancy_upscaling=fancy_upscaling
        )

    image = tf.cond(tf.io.is_jpeg(image_bytes), jpeg, lambda: _decode_any(image_bytes))
    image.set_shape([None, None, 3])
    return _crop(image, random_crop_window(tf.shape(image), boxes, seed))


def _train_from_crop(crop: tf.Tensor, seed: tf.Tensor, image_size: int, dtype: Any) -> tf.Tensor:
    # Flip the uint8 crop, then resize (the order of NVIDIA's scripts): bilinear resizing with
    # half-pixel centres commutes with mirroring, and reversing uint8 rows costs less than
    # reversing the float32 output. Casting to float32 first is not a change of result (the
    # resize computes in float32 either way) but TensorFlow's CPU kernel resizes float32
    # input faster than uint8.
    crop = tf.image.stateless_random_flip_left_right(crop, seed)
    image = tf.image.resize(tf.cast(crop, tf.float32), [image_size, image_size], method="bilinear")
    return normalize(image, dtype)


def preprocess_for_train(
    image_bytes: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    image_size: int = 224,
    dtype: Any = tf.float32,
) -> tf.Tensor:
    """NVIDIA ResNet-50 v1.5 training preprocessing, crop fused with JPEG decoding.

    Args:
        image_bytes: scalar string, an encoded image.
        boxes: float32 [num_boxes, 4] normalized `[ymin, xmin, ymax, xmax]` (may be empty).
        seed: [2] int, the image's random seed.
        image_size: output height and width.
        dtype: output dtype.

    Returns:
        [image_size, image_size, 3] normalized RGB, `dtype`.
    """
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    crop = decode_and_random_crop(image_bytes, boxes, crop_seed)
    return _train_from_crop(crop, flip_seed, image_size, dtype)


def preprocess_for_train_reference(
    image_bytes: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    image_size: int = 224,
    dtype: Any = tf.float32,
) -> tf.Tensor:
    """`preprocess_for_train` with the whole image decoded before cropping (the baseline the
    input benchmark compares against). Same crop and flip for the same seed."""
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    crop = decode_then_random_crop(image_bytes, boxes, crop_seed)
    return _train_from_crop(crop, flip_seed, image_size, dtype)


def resize_shorter_side(image: tf.Tensor, size: int) -> tf.Tensor:
    """Bilinear resize so the shorter side is `size`, keeping the aspect ratio.

    The longer side is rounded to the nearest pixel: a 375 x 500 image with size 256 becomes
    256 x 341 (500 * 256 / 375 = 341.33). Returns float32.
    """
    shape = tf.shape(image)
    height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
    scale = tf.cast(size, tf.float32) / tf.minimum(height, width)
    new_h = tf.where(height <= width, size, tf.cast(tf.round(height * scale), tf.int32))
    new_w = tf.where(width < height, size, tf.cast(tf.round(width * scale), tf.int32))
    return tf.image.resize(image, tf.stack([new_h, new_w]), method="bilinear")


def central_crop(image: tf.Tensor, size: int) -> tf.Tensor:
    """The central `size` x `size` crop (offsets rounded down)."""
    shape = tf.shape(image)
    top = (shape[0] - size) // 2
    left = (shape[1] - size) // 2
    return image[top : top + size, left : left + size]


def eval_resize_size(image_size: int) -> int:
    """The shorter side evaluation resizes to: `round(image_size / 0.875)` (224 -> 256)."""
    return round(image_size / EVAL_CROP_FRACTION)


def preprocess_for_eval(
    image_bytes: tf.Tensor, *, image_size: int = 224, dtype: Any = tf.float32
) -> tf.Tensor:
    """Evaluation preprocessing: shorter side to `image_size / 0.875`, central crop.

    Args:
        image_bytes: scalar string, an encoded image.
        image_size: output height and width.
        dtype: output dtype.

    Returns:
        [image_size, image_size, 3] normalized RGB, `dtype`.
    """
    image = _decode_any(image_bytes)
    image = resize_shorter_side(image, eval_resize_size(image_size))
    image = central_crop(image, image_size)
    image = tf.ensure_shape(image, [image_size, image_size, 3])
    return normalize(image, dtype)
