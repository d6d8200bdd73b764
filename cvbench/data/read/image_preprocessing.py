"""`ImagePreprocessing`: every knob of the classification input recipe, as one frozen value.

The defaults are the NVIDIA ResNet-50 v1.5 pipeline that `cvbench.data.read.preprocessing` has
always run (so nothing changes unless a knob is set); `ImagePreprocessing.nvcnn_inception_v3()`
is the nvcnn Inception V3 one. This module imports no TensorFlow (a recipe can hold its
preprocessing without loading it); the functions that apply it are
`cvbench.data.read.preprocessing.preprocess_for_train` / `preprocess_for_eval`, which
`imagenet_dataset(..., preprocessing=...)` and `tfds_dataset(..., preprocessing=...)` call.

Pixel values are RGB in [0, 255]; crop windows and boxes are normalized
`[ymin, xmin, ymax, xmax]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cvbench.data.read.channel_means import IMAGENET_MEAN_RGB, IMAGENET_STD_RGB
from cvbench.utils.model_file import DCT_METHODS, EVAL_CROP_RULES, resize_rule

#: The evaluation crops: `ModelInfo.resize`'s rules of the same names (one vocabulary; the
#: deprecated spelling "resize_then_crop" is read as "center_crop").
EVAL_CROPS = EVAL_CROP_RULES
INPUT_SCALINGS = ("mean_std", "inception")
# `tf.image.ResizeMethod`'s names (tests/data/read/test_preprocessing_knobs.py checks the list),
# plus "bilinear_tf1": TF1's `tf.image.resize_images(..., BILINEAR, align_corners=False)`,
# i.e. `tf.compat.v1.image.resize_bilinear` without half-pixel centres (nvcnn's resize).
TF_RESIZE_METHODS = (
    "area",
    "bicubic",
    "bilinear",
    "gaussian",
    "lanczos3",
    "lanczos5",
    "mitchellcubic",
    "nearest",
)
RESIZE_METHODS = (*TF_RESIZE_METHODS, "bilinear_tf1")


def _range(name: str, value: object, upper: float | None = None) -> tuple[float, float]:
    ok = isinstance(value, tuple | list) and len(value) == 2
    ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ok = ok and all(math.isfinite(v) for v in value) and 0 < value[0] <= value[1]
    if ok and upper is not None:
        ok = value[1] <= upper
    if not ok:
        bound = f" <= {upper}" if upper is not None else ""
        raise ValueError(f"{name} must be a pair 0 < low <= high{bound}, got {value!r}")
    return (float(value[0]), float(value[1]))


def _triple(name: str, value: object, positive: bool) -> tuple[float, float, float]:
    ok = isinstance(value, tuple | list) and len(value) == 3
    ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ok = ok and all(math.isfinite(v) and (v > 0 or not positive) for v in value)
    if not ok:
        kind = "positive " if positive else ""
        raise ValueError(f"{name} must be 3 finite {kind}numbers (R, G, B), got {value!r}")
    return (float(value[0]), float(value[1]), float(value[2]))


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


@dataclass(frozen=True)
class ImagePreprocessing:
    """The classification input recipe (training crop, evaluation crop, scaling, decoding).

    Training: a crop window from `tf.image.stateless_sample_distorted_bounding_box(
    aspect_ratio_range, area_range, min_object_covered, max_attempts,
    use_image_if_no_bounding_boxes=True)` (the whole image when no attempt succeeds), decoded
    fused with the JPEG decode; a random left-right flip (`flip`); resized to the output size
    with `resize_method`. Evaluation: `eval_crop`, one of

    * "center_crop": shorter side to `round(size / crop_fraction)` keeping the aspect
      ratio, then the central `size` x `size` crop (DLE's ResNet-50; 224 -> 256 -> 224);
    * "crop_then_resize": `tf.image.central_crop(image, crop_fraction)` (each side keeps its
      central `crop_fraction`, so the aspect ratio is the image's), then resized to
      `size` x `size` without keeping the aspect ratio (nvcnn's Inception V3).

    Both: optionally the resized image rounded down to uint8 (`quantize_uint8`, nvcnn's);
    `input_scaling` "mean_std" (`(x - mean) / std` per channel) or "inception"
    (`x * (1 / 127.5) - 1`, nvcnn's `input_layer`: [0, 255] -> [-1, 1]; `mean` and `std`
    unused); JPEG bytes decoded with `dct_method` and `fancy_upscaling` (TensorFlow's
    defaults; DLE and nvcnn pass "INTEGER_FAST", TensorFlow's default IDCT anyway, and
    False), other formats decoded whole.

    Args:
        aspect_ratio_range: (low, high) crop width / height, 0 < low <= high.
        area_range: (low, high) crop area as a fraction of the image, 0 < low <= high <= 1.
        min_object_covered: the fraction of a bounding box the crop must cover, in [0, 1].
        max_attempts: crop windows tried before falling back to the whole image (>= 1).
        eval_crop: "center_crop" or "crop_then_resize" (above): the names of the model
            file's `ModelInfo.resize`. "resize_then_crop", the former name of "center_crop",
            is deprecated and read as "center_crop".
        crop_fraction: the evaluation crop's fraction, in (0, 1] (0.875: 224 of 256).
        input_scaling: "mean_std" or "inception" (above).
        mean: per-channel RGB means for "mean_std".
        std: per-channel RGB standard deviations for "mean_std" (positive).
        resize_method: a `tf.image.ResizeMethod` name ("bilinear", "nearest", "bicubic", ...)
            or "bilinear_tf1" (TF1's bilinear without half-pixel centres, nvcnn's). The
            cubic and Lanczos kernels can overshoot [0, 255]; nothing clips.
        flip: random left-right flip in training (before resizing, DLE's order; after it for
            "bilinear_tf1", nvcnn's order, since that resize is not mirror-symmetric).
        dct_method: the JPEG decoder's IDCT: "" (TensorFlow's default, which is its
            "INTEGER_FAST": `decode_image_op.cc`, "The TensorFlow-chosen default for JPEG
            decoding is IFAST"; the same pixels), "INTEGER_FAST", "INTEGER_ACCURATE"
            (libjpeg's slow integer IDCT: slightly different pixels).
        fancy_upscaling: the JPEG decoder interpolates subsampled chroma (True, default)
            or replicates it (False, DLE's and nvcnn's).
        quantize_uint8: after resizing, clip to [0, 255] and cast to uint8 (truncating), as
            nvcnn does before its scaling; False (default): the float pixels are scaled.

    Raises:
        ValueError: a field out of range or of the wrong type (the message names the value).

    Example:
        >>> ImagePreprocessing().eval_resize_size(224)
        256
        >>> ImagePreprocessing.nvcnn_inception_v3().input_scaling
        'inception'
    """

    aspect_ratio_range: tuple[float, float] = (0.75, 1.33)
    area_range: tuple[float, float] = (0.05, 1.0)
    min_object_covered: float = 0.1
    max_attempts: int = 100
    eval_crop: str = "center_crop"
    crop_fraction: float = 0.875
    input_scaling: str = "mean_std"
    mean: tuple[float, float, float] = IMAGENET_MEAN_RGB
    std: tuple[float, float, float] = IMAGENET_STD_RGB
    resize_method: str = "bilinear"
    flip: bool = True
    dct_method: str = ""
    fancy_upscaling: bool = True
    quantize_uint8: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "aspect_ratio_range", _range("aspect_ratio_range", self.aspect_ratio_range))
        set_(self, "area_range", _range("area_range", self.area_range, upper=1.0))
        m = self.min_object_covered
        if isinstance(m, bool) or not isinstance(m, int | float) or not 0.0 <= m <= 1.0:
            raise ValueError(f"min_object_covered must be a number in [0, 1], got {m!r}")
        set_(self, "min_object_covered", float(m))
        a = self.max_attempts
        if isinstance(a, bool) or not isinstance(a, int) or a < 1:
            raise ValueError(f"max_attempts must be a positive int, got {a!r}")
        set_(self, "eval_crop", resize_rule(self.eval_crop, name="eval_crop", rules=EVAL_CROPS))
        f = self.crop_fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 < f <= 1.0:
            raise ValueError(f"crop_fraction must be a number in (0, 1], got {f!r}")
        set_(self, "crop_fraction", float(f))
        _choice("input_scaling", self.input_scaling, INPUT_SCALINGS)
        set_(self, "mean", _triple("mean", self.mean, positive=False))
        set_(self, "std", _triple("std", self.std, positive=True))
        _choice("resize_method", self.resize_method, RESIZE_METHODS)
        if not isinstance(self.flip, bool):
            raise ValueError(f"flip must be a bool, got {self.flip!r}")
        _choice("dct_method", self.dct_method, DCT_METHODS)
        if not isinstance(self.fancy_upscaling, bool):
            raise ValueError(f"fancy_upscaling must be a bool, got {self.fancy_upscaling!r}")
        if not isinstance(self.quantize_uint8, bool):
            raise ValueError(f"quantize_uint8 must be a bool, got {self.quantize_uint8!r}")

    def eval_resize_size(self, image_size: int) -> int:
        """ "center_crop"'s shorter side: `round(image_size / crop_fraction)`."""
        return round(image_size / self.crop_fraction)

    @property
    def default_jpeg_decoding(self) -> bool:
        """True when JPEGs decode with TensorFlow's default options."""
        return self.dct_method == "" and self.fancy_upscaling

    @classmethod
    def nvcnn_inception_v3(cls) -> ImagePreprocessing:
        """nvcnn's (`nvcnn_hvd.py` v1.1) Inception V3 input pipeline.

        From the copy of `nvcnn_hvd.py` v1.1 in XuanBaby/Tensorflow-lars (commit b2e4e44):
        `decode_jpeg(fancy_upscaling=False, dct_method='INTEGER_FAST')` (lines 329-332);
        train crop `min_object_covered=0.1, aspect_ratio_range=[0.8, 1.25],
        area_range=[0.1, 1.0], max_attempts=100` (lines 342-349); eval
        `tf.image.central_crop(image, 224./256.)` (line 340); both resized with
        `tf.image.resize_images(..., BILINEAR, align_corners=False)` (lines 353-357, TF1:
        no half-pixel centres); flip after the resize (line 408); `x * (1./127.5) - 1`
        (line 146), after `clip_by_value(images, 0., 255.)` and a cast to uint8 (lines
        444-445, `ImagePreprocessor(dtype=tf.uint8)` line 386).
        """
        return cls(
            aspect_ratio_range=(0.8, 1.25),
            area_range=(0.1, 1.0),
            eval_crop="crop_then_resize",
            crop_fraction=224 / 256,
            input_scaling="inception",
            resize_method="bilinear_tf1",
            dct_method="INTEGER_FAST",
            fancy_upscaling=False,
            quantize_uint8=True,
        )
