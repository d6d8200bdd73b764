"""The SSD training augmentation's settings (`DetectionAugmentation`) and its colour jitter.

SSD320 v1.2 (`configs/ssd320_full_8gpus.config`, `data_augmentation_options`) flips and crops
only; NVIDIA's README also lists colour jitter, which the config does not enable. Here it is a
switch, off in the recipe: `color_jitter` applies the OD API's four colour operations with
their default ranges (`object_detection/protos/preprocessor.proto`, as
`core/preprocessor.py` runs them on `[0, 255]` images: divide by 255, adjust, multiply by 255,
clip to `[0, 255]`), in this order, each with its own stateless random factor:

- brightness: `tf.image.adjust_brightness(x, delta)`, delta uniform in `[-0.2, 0.2)`;
- contrast: `tf.image.adjust_contrast(x, f)`, f uniform in `[0.8, 1.25)`;
- saturation: `tf.image.adjust_saturation(x, f)`, f uniform in `[0.8, 1.25)`;
- hue: `tf.image.adjust_hue(x, delta)`, delta uniform in `[-0.02, 0.02)`.

Boxes are untouched. The factors come from the example's seed (`jitter_factors`), so a run
with a fixed seed jitters alike each time.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

#: SSD320 v1.2's crop (`random_crop_image`): width / height, and area as a fraction of the image.
CROP_ASPECT_RATIO_RANGE: tuple[float, float] = (0.75, 3.0)
CROP_AREA_RANGE: tuple[float, float] = (0.75, 1.0)
#: The OD API proto defaults: brightness max delta, contrast / saturation ranges, hue max delta.
BRIGHTNESS_MAX_DELTA = 0.2
CONTRAST_RANGE = (0.8, 1.25)
SATURATION_RANGE = (0.8, 1.25)
HUE_MAX_DELTA = 0.02
#: Folded into the example's seed to draw the jitter factors (the crop and the flip use the
#: seed's split: the factors never share their random numbers).
_JITTER_STREAM = 7


@dataclasses.dataclass(frozen=True)
class DetectionAugmentation:
    """What `coco_dataset` does to a training image (the module docstring; the defaults are
    SSD320 v1.2's: crop as `random_crop_image` with aspect 0.75-3.0, area 0.75-1.0, no
    minimum object cover; flip; no colour jitter).

    Raises:
        ValueError: for a range that is not `0 < low <= high` (area at most 1), or a minimum
            object cover outside `[0, 1]`, naming the value.
    """

    flip: bool = True
    crop_aspect_range: tuple[float, float] = CROP_ASPECT_RATIO_RANGE
    crop_area_range: tuple[float, float] = CROP_AREA_RANGE
    crop_min_object_covered: float = 0.0
    color_jitter: bool = False

    def __post_init__(self) -> None:
        for name in ("crop_aspect_range", "crop_area_range"):
            low, high = (float(v) for v in getattr(self, name))
            if not 0.0 < low <= high or (name == "crop_area_range" and high > 1.0):
                raise ValueError(f"{name} must be 0 < low <= high (area <= 1); got {(low, high)}")
            object.__setattr__(self, name, (low, high))
        if not 0.0 <= float(self.crop_min_object_covered) <= 1.0:
            raise ValueError(
                f"crop_min_object_covered must be in [0, 1]; got {self.crop_min_object_covered!r}"
            )
        for name in ("flip", "color_jitter"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool; got {getattr(self, name)!r}")


def jitter_factors(seed: tf.Tensor) -> tf.Tensor:
    """float32 [4]: brightness delta, contrast factor, saturation factor, hue delta, drawn
    from `seed` (int [2]) in the module docstring's ranges."""
    seeds = tf.random.split(tf.random.experimental.stateless_fold_in(seed, _JITTER_STREAM), 4)
    lows = (-BRIGHTNESS_MAX_DELTA, CONTRAST_RANGE[0], SATURATION_RANGE[0], -HUE_MAX_DELTA)
    highs = (BRIGHTNESS_MAX_DELTA, CONTRAST_RANGE[1], SATURATION_RANGE[1], HUE_MAX_DELTA)
    return tf.stack([
        tf.random.stateless_uniform([], seeds[i], minval=lows[i], maxval=highs[i])
        for i in range(4)
    ])  # fmt: skip


def color_jitter(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """The colour jitter of the module docstring on an RGB image `[H, W, 3]` in `[0, 255]`
    (any dtype); float32 out, in `[0, 255]`."""
    brightness, contrast, saturation, hue = tf.unstack(jitter_factors(seed))
    x = tf.cast(image, tf.float32)
    for adjust, factor in (
        (tf.image.adjust_brightness, brightness),
        (tf.image.adjust_contrast, contrast),
        (tf.image.adjust_saturation, saturation),
        (tf.image.adjust_hue, hue),
    ):
        x = tf.clip_by_value(adjust(x / 255.0, factor) * 255.0, 0.0, 255.0)
    return x
