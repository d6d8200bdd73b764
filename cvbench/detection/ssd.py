"""SSD: a ResNet backbone + FPN + weight-shared head (wiring only), and the SSD320 v1.2 preset.

`build_ssd(...)` builds any member of the family (backbone depth, pyramid/head width, tower
depth, input normalization, batch-norm momentum); `ssd320(...)` is SSD320 v1.2: ResNet-50 v1,
256 channels, 4 tower convolutions, the channel means subtracted in the model. The demo's
small detector is `build_ssd(...)` with plain arguments (`cvbench.demo.detect.demo_ssd`).

Model contract:

- Input: float32 `(B, H, W, 3)` RGB images with values in `[0, 255]`, already resized to
  `image_size` (a fixed resize that ignores aspect ratio). The model normalizes them itself:
  `(x - mean) / std` with `mean`/`std` (SSD320: the channel means (123.68, 116.779, 103.939),
  no division); with `include_preprocessing=False` it expects normalized images.
- Output: `{"boxes": (B, N, 4), "classes": (B, N, num_classes)}`, float32 under any dtype
  policy: box codes (`box_coder`, scales 10/10/5/5) and class logits (sigmoid, no background
  class) for the `N` anchors of `anchors.multiscale_anchors(image_size)`, in that order.
  The keys are those of `targets.py`'s `y_true`.

Batch norm: with `freeze_batchnorm` every batch norm of the backbone, the FPN and the head
uses its moving statistics in training too (gamma and beta still train), as the OD API's
`freeze_batchnorm: true`. Weight decay: the OD API L2 weight `weight_decay` (4e-4) on every
convolution kernel, backbone included (`override_base_feature_extractor_hyperparams`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras
from keras import layers

from cvbench.data.read.channel_means import CAFFE_MEAN_RGB
from cvbench.detection.anchors import (
    MAX_LEVEL,
    MIN_LEVEL,
    anchors_per_location,
    feature_map_sizes,
    image_hw,
)
from cvbench.detection.backbone import BACKBONE_LEVELS, build_backbone
from cvbench.detection.fpn import FeaturePyramid
from cvbench.detection.heads import WeightSharedHead
from cvbench.utils.model_layers import all_layers

#: RGB channel means subtracted by SSD320 v1.2's ResNet feature extractor.
CHANNEL_MEANS = CAFFE_MEAN_RGB


def build_ssd(
    *,
    num_classes: int,
    backbone: str,
    image_size: int | Sequence[int],
    depth: int = 256,
    head_layers: int = 4,
    freeze_batchnorm: bool = True,
    backbone_weights: str | os.PathLike | None = None,
    weight_decay: float = 4e-4,
    include_preprocessing: bool = True,
    mean: Sequence[float] = CHANNEL_MEANS,
    std: Sequence[float] | None = None,
    bn_momentum: float | None = None,
    name: str = "ssd",
) -> keras.Model:
    """An SSD (RetinaNet-style, ResNet FPN P3-P7, weight-shared head); see the module docstring.

    Args:
        num_classes: object classes (sigmoid scores, no background class).
        backbone: a ResNet name (`"resnet50_v1"`, `"resnet18"`, ...; see
            `backbone.parse_backbone`).
        image_size: fixed input size, an int or `(height, width)`; any size >= 32.
        depth: channels of the pyramid and of the head towers (SSD320: 256).
        head_layers: convolutions per head tower (SSD320: 4).
        freeze_batchnorm: use moving batch-norm statistics in training too.
        backbone_weights: `"imagenet"` (keras.applications' ResNet-50 `_notop` file, fetched
            and cached as Keras does; `_v1` backbones), a weight file for the backbone, or
            None for a random initialization (see `backbone.build_backbone`).
        weight_decay: OD API L2 weight on every conv kernel.
        include_preprocessing: normalize in the model (inputs in `[0, 255]`); False for
            inputs the data pipeline already normalized.
        mean: per-channel RGB mean subtracted from the `[0, 255]` input.
        std: per-channel standard deviation the input is divided by (None: no division).
        bn_momentum: momentum of every batch norm's moving statistics (None: each layer's
            own: 0.9 in the backbone, 0.997 in the pyramid and head).
        name: the model's name.

    Returns:
        A functional `keras.Model`:
        `(B, H, W, 3)` -> `{"boxes": (B, N, 4), "classes": (B, N, num_classes)}`.

    Raises:
        ValueError: for a bad size, class count or backbone name, or a backbone whose maps do
            not have the sizes the anchors assume.
    """
    if isinstance(num_classes, bool) or not (isinstance(num_classes, int) and num_classes >= 1):
        raise ValueError(f"num_classes must be an int >= 1; got {num_classes!r}")
    hw = image_hw(image_size)
    sizes = feature_map_sizes(hw, min_level=MIN_LEVEL, max_level=MAX_LEVEL)
    features = build_backbone(
        backbone,
        hw,
        weights=backbone_weights,
        freeze_batchnorm=freeze_batchnorm,
        weight_decay=weight_decay,
    )
    inputs = keras.Input(shape=(*hw, 3), name="images")
    x = inputs
    if include_preprocessing:
        x = _normalization(mean, std)(inputs)
    pyramid = FeaturePyramid(
        num_inputs=len(BACKBONE_LEVELS),
        num_extra_levels=MAX_LEVEL - 5,
        depth=depth,
        weight_decay=weight_decay,
        freeze_batchnorm=freeze_batchnorm,
        name="fpn",
    )(features(x))
    actual = [tuple(p.shape[1:3]) for p in pyramid]
    if actual != sizes:
        raise ValueError(
            f"backbone {backbone!r} gives pyramid sizes {actual} at {hw}, but the anchors "
            f"assume ceil(side / stride) = {sizes}"
        )
    boxes, classes = WeightSharedHead(
        num_classes=num_classes,
        num_levels=len(pyramid),
        anchors_per_location=anchors_per_location(),
        depth=depth,
        num_layers=head_layers,
        weight_decay=weight_decay,
        freeze_batchnorm=freeze_batchnorm,
        name="head",
    )(pyramid)
    model = keras.Model(inputs, {"boxes": boxes, "classes": classes}, name=name)
    if bn_momentum is not None:
        for layer in all_layers(model):
            if isinstance(layer, layers.BatchNormalization):
                layer.momentum = bn_momentum
    return model


def _normalization(mean: Sequence[float], std: Sequence[float] | None) -> layers.Layer:
    """A `Rescaling` layer computing `(x - mean) / std` (SSD320: `x - mean`)."""
    if std is None:
        return layers.Rescaling(1.0, offset=[-m for m in mean], name="subtract_channel_means")
    return layers.Rescaling(
        [1.0 / s for s in std],
        offset=[-m / s for m, s in zip(mean, std, strict=True)],
        name="normalize",
    )


def ssd320(
    *,
    num_classes: int = 90,
    backbone: str = "resnet50_v1",
    image_size: int | Sequence[int] = 320,
    freeze_batchnorm: bool = True,
    backbone_weights: str | os.PathLike | None = None,
    weight_decay: float = 4e-4,
    include_preprocessing: bool = True,
) -> keras.Model:
    """SSD320 v1.2 (RetinaNet-style SSD with a ResNet-50 v1 FPN): the `build_ssd` preset.

    Args:
        num_classes: object classes (90 for COCO's category ids 1..90 mapped to 0..89).
        backbone: `"resnet50_v1"` (the recipe) or another ResNet (`"resnet18"`, ...).
        image_size: fixed input size, an int or `(height, width)`; any size >= 32.
        freeze_batchnorm: use moving batch-norm statistics in training too (the recipe).
        backbone_weights: `"imagenet"` (keras.applications' ResNet-50 `_notop` file, fetched
            and cached as Keras does), a weight file for the backbone (e.g. that file, legacy
            `.h5` or Keras 3 `.weights.h5`), or None for a random initialization.
        weight_decay: OD API L2 weight on every conv kernel (4e-4).
        include_preprocessing: subtract the channel means in the model (inputs in
            `[0, 255]`); False for inputs whose means the data pipeline already subtracted.

    Returns:
        A functional `keras.Model` named `ssd320`:
        `(B, H, W, 3)` -> `{"boxes": (B, N, 4), "classes": (B, N, num_classes)}`.

    Raises:
        ValueError: as `build_ssd`.

    Example:
        >>> model = ssd320(num_classes=3, backbone="resnet18", image_size=128)
        >>> {k: v.shape for k, v in model.output.items()}
        {'boxes': (None, 2046, 4), 'classes': (None, 2046, 3)}
    """
    return build_ssd(
        num_classes=num_classes,
        backbone=backbone,
        image_size=image_size,
        depth=256,
        head_layers=4,
        freeze_batchnorm=freeze_batchnorm,
        backbone_weights=backbone_weights,
        weight_decay=weight_decay,
        include_preprocessing=include_preprocessing,
        mean=CHANNEL_MEANS,
        name="ssd320",
    )
