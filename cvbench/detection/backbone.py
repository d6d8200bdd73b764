"""SSD backbones: a ResNet of `cvbench.models.resnet` returning its C3, C4, C5 maps.

The backbone is built through the ResNet module itself (not the model table), so detection
depends on classification builders and nothing depends back. For detection the ResNet is
cloned with `FreezableBatchNormalization` in place of each batch norm and an L2 regularizer
on each convolution kernel (the OD API's `override_base_feature_extractor_hyperparams`).

Input convention: `(B, H, W, 3)` images already normalized (SSD320: RGB in [0, 255] minus the
channel means), output `[C3, C4, C5]` at strides 8, 16, 32.
"""

from __future__ import annotations

import os

import keras
from keras import layers

from cvbench.detection.batchnorm import FreezableBatchNormalization
from cvbench.detection.fpn import l2_regularizer
from cvbench.models import resnet

BACKBONE_LEVELS = ("C3", "C4", "C5")


def parse_backbone(backbone: str) -> tuple[int, str]:
    """`"resnet50_v1"` -> `(50, "v1")`; `"resnet18"` -> `(18, "v1.5")` (the builders' default).

    Raises:
        ValueError: for a name that is not `resnet<depth>` with an optional `_v1` / `_v1.5`.
    """
    name, sep, variant = backbone.partition("_")
    if not name.startswith("resnet") or (sep and variant not in resnet.VARIANTS):
        raise ValueError(
            f"backbone must be a registered ResNet name, optionally with _v1 or _v1.5 "
            f"(e.g. 'resnet50_v1', 'resnet18'); got {backbone!r}"
        )
    depth = name[len("resnet") :]
    if not depth.isdigit() or int(depth) not in resnet.STAGE_BLOCKS:
        known = ", ".join(f"resnet{d}" for d in sorted(resnet.STAGE_BLOCKS))
        raise ValueError(f"unknown model {name!r}; known: {known}")
    return int(depth), (variant if sep else "v1.5")


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


def build_backbone(
    backbone: str,
    input_hw: tuple[int, int],
    *,
    weights: str | os.PathLike | None = None,
    freeze_batchnorm: bool = True,
    weight_decay: float = 4e-4,
) -> keras.Model:
    """A ResNet returning its C3, C4, C5 maps (strides 8, 16, 32).

    Args:
        backbone: `"resnet50_v1"`, or any ResNet depth (`"resnet18"`, ...), with an optional
            `_v1` / `_v1.5` suffix (default v1.5).
        input_hw: input `(height, width)`.
        weights: `"imagenet"` (keras.applications' ResNet-50 `_notop` file, fetched and
            cached as Keras does; needs a `_v1` backbone such as `"resnet50_v1"`) or a weight
            file for the backbone, loaded by `cvbench.models.weights`. keras.applications'
            weights (`"imagenet"`, a legacy HDF5 or a Keras 3 `.weights.h5` file of a
            keras.applications ResNet) are BGR: `resnet.build_resnet` flips the stem kernel's
            input channels when it loads them (`resnet.rgb_stem`), so the backbone takes RGB.
        freeze_batchnorm: make every batch norm use its moving statistics in training too.
        weight_decay: OD API L2 weight on conv kernels.

    Returns:
        A functional model named `resnet<depth>_backbone`: `(B, H, W, 3)` (already
        normalized) -> `[C3, C4, C5]`.

    Raises:
        ValueError: for an unknown backbone name, `"imagenet"` for a backbone keras.applications
            publishes no weights for, or a weight file that does not fit.
    """
    depth, variant = parse_backbone(backbone)
    model = resnet.build_resnet(
        depth=depth, variant=variant, include_top=False, input_shape=(*input_hw, 3), weights=weights
    )
    model = _detection_clone(model, freeze_batchnorm=freeze_batchnorm, weight_decay=weight_decay)
    names = resnet.feature_layer_names(model)
    outputs = [model.get_layer(names[level]).output for level in BACKBONE_LEVELS]
    return keras.Model(model.inputs, outputs, name=f"resnet{depth}_backbone")


def copy_backbone_weights(classifier: keras.Model, detector: keras.Model) -> int:
    """Copies a classifier's weights into a detector's backbone, layer by layer by name.

    Every backbone layer holding weights must have a same-named layer with same-shaped
    weights in the classifier (the classifier's head has no counterpart and is left out).
    This is how a detector starts from a classifier trained in the same program (the demo).

    Returns:
        The number of layers copied.

    Raises:
        ValueError: if the detector has no backbone sub-model, or a layer has no match.
    """
    backbones = [
        layer
        for layer in detector.layers
        if isinstance(layer, keras.Model) and layer.name.endswith("_backbone")
    ]
    if len(backbones) != 1:
        raise ValueError(
            f"expected one '*_backbone' sub-model in {detector.name!r}, found "
            f"{[b.name for b in backbones]}"
        )
    source = {layer.name: layer for layer in classifier.layers}
    copied = 0
    for layer in backbones[0].layers:
        if not layer.weights:
            continue
        match = source.get(layer.name)
        shapes = [tuple(w.shape) for w in layer.weights]
        if match is None or [tuple(w.shape) for w in match.weights] != shapes:
            raise ValueError(
                f"backbone layer {layer.name!r} {shapes} has no same-shaped layer in "
                f"{classifier.name!r}"
            )
        layer.set_weights(match.get_weights())
        copied += 1
    return copied
