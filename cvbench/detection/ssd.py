"""SSD320 v1.2: ResNet-50 v1 + FPN (P3-P7) + weight-shared head. Wiring only.

Model contract:

- Input: float32 `(B, H, W, 3)` RGB images with values in `[0, 255]`, already resized to
  `image_size` (a fixed resize that ignores aspect ratio). The model subtracts the channel
  means (123.68, 116.779, 103.939) itself (no division by a standard deviation); with
  `include_preprocessing=False` it expects images with the means already subtracted.
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
from typing import Any

import keras
from keras import layers

from cvbench.detection.anchors import anchors_per_location, feature_map_sizes, image_hw
from cvbench.detection.batchnorm import FreezableBatchNormalization
from cvbench.detection.fpn import FeaturePyramid, l2_regularizer
from cvbench.detection.heads import WeightSharedHead

#: RGB channel means subtracted by SSD320 v1.2's ResNet feature extractor.
CHANNEL_MEANS = (123.68, 116.779, 103.939)
MIN_LEVEL, MAX_LEVEL = 3, 7
BACKBONE_LEVELS = ("C3", "C4", "C5")


def _backbone_builder(backbone: str) -> tuple[str, dict[str, Any]]:
    """`"resnet50_v1"` -> `("resnet50", {"variant": "v1"})`; `"resnet18"` -> `("resnet18", {})`."""
    name, sep, variant = backbone.partition("_")
    if not name.startswith("resnet") or (sep and variant not in ("v1", "v1.5")):
        raise ValueError(
            f"backbone must be a registered ResNet name, optionally with _v1 or _v1.5 "
            f"(e.g. 'resnet50_v1', 'resnet18'); got {backbone!r}"
        )
    return name, ({"variant": variant} if sep else {})


def _detection_clone(
    backbone: keras.Model, *, freeze_batchnorm: bool, weight_decay: float
) -> keras.Model:
    """The same backbone and weights with freezable batch norms and L2 on conv kernels."""

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        config = layer.get_config()
        if isinstance(layer, layers.BatchNormalization):
            return FreezableBatchNormalization(frozen=freeze_batchnorm, **config)
        if isinstance(layer, layers.Conv2D):
            config["kernel_regularizer"] = l2_regularizer(weight_decay)
        return layer.__class__.from_config(config)

    clone_model = keras.models.clone_model(backbone, clone_function=clone)
    clone_model.set_weights(backbone.get_weights())
    return clone_model


def _bgr_to_rgb_stem(model: keras.Model) -> None:
    """Reverses the input-channel axis of the first conv kernel, in place.

    keras.applications' ResNet-50 weights were trained on BGR images with the caffe means
    subtracted; SSD320 feeds RGB images with the same means in RGB order. Reversing the stem
    kernel's input channels makes the pretrained backbone see what it was trained on.
    """
    kernel = model.get_layer("conv1_conv").kernel
    kernel.assign(keras.ops.flip(kernel, axis=2))


def build_backbone(
    backbone: str,
    input_hw: tuple[int, int],
    *,
    weights: str | os.PathLike | None = None,
    freeze_batchnorm: bool = True,
    weight_decay: float = 4e-4,
) -> keras.Model:
    """A registry ResNet returning its C3, C4, C5 maps (strides 8, 16, 32).

    Args:
        backbone: `"resnet50_v1"`, or any registered ResNet name (`"resnet18"`, ...), with an
            optional `_v1` / `_v1.5` suffix.
        input_hw: input `(height, width)`.
        weights: a weight file for the backbone (e.g. keras.applications' ResNet-50
            `_notop` file), loaded by `cvbench.models`. A keras.applications (legacy HDF5)
            file holds BGR weights: its stem kernel is flipped to take RGB input.
        freeze_batchnorm: make every batch norm use its moving statistics in training too.
        weight_decay: OD API L2 weight on conv kernels.

    Returns:
        A functional model: `(B, H, W, 3)` (already mean-subtracted) -> `[C3, C4, C5]`.

    Raises:
        ValueError: for an unknown backbone name.
    """
    # Imported here: the model registry may itself import this module to register ssd320.
    from cvbench.models import get_model, resnet
    from cvbench.models.weights import is_legacy_h5

    name, kwargs = _backbone_builder(backbone)
    model = get_model(
        name, include_top=False, input_shape=(*input_hw, 3), weights=weights, **kwargs
    )
    if weights is not None and is_legacy_h5(weights):
        _bgr_to_rgb_stem(model)
    model = _detection_clone(model, freeze_batchnorm=freeze_batchnorm, weight_decay=weight_decay)
    names = resnet.feature_layer_names(model)
    outputs = [model.get_layer(names[level]).output for level in BACKBONE_LEVELS]
    return keras.Model(model.inputs, outputs, name=f"{name}_backbone")


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
    """SSD320 v1.2 (RetinaNet-style SSD with a ResNet-50 v1 FPN); see the module docstring.

    Args:
        num_classes: object classes (90 for COCO's category ids 1..90 mapped to 0..89).
        backbone: `"resnet50_v1"` (the recipe) or another registry ResNet (`"resnet18"`, ...).
        image_size: fixed input size, an int or `(height, width)`; any size >= 32.
        freeze_batchnorm: use moving batch-norm statistics in training too (the recipe).
        backbone_weights: weight file for the backbone (keras.applications `_notop` file for
            ResNet-50), or None for a random initialization.
        weight_decay: OD API L2 weight on every conv kernel (4e-4).
        include_preprocessing: subtract the channel means in the model (inputs in
            `[0, 255]`); False for inputs whose means the data pipeline already subtracted.

    Returns:
        A functional `keras.Model` named `ssd320`:
        `(B, H, W, 3)` -> `{"boxes": (B, N, 4), "classes": (B, N, num_classes)}`.

    Raises:
        ValueError: for a bad size, class count or backbone name, or a backbone whose maps do
            not have the sizes the anchors assume.

    Example:
        >>> model = ssd320(num_classes=3, backbone="resnet18", image_size=128)
        >>> {k: v.shape for k, v in model.output.items()}
        {'boxes': (None, 2046, 4), 'classes': (None, 2046, 3)}
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
        offset = [-m for m in CHANNEL_MEANS]
        x = layers.Rescaling(1.0, offset=offset, name="subtract_channel_means")(inputs)
    pyramid = FeaturePyramid(
        num_inputs=len(BACKBONE_LEVELS),
        num_extra_levels=MAX_LEVEL - 5,
        depth=256,
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
        weight_decay=weight_decay,
        freeze_batchnorm=freeze_batchnorm,
        name="head",
    )(pyramid)
    return keras.Model(inputs, {"boxes": boxes, "classes": classes}, name="ssd320")
