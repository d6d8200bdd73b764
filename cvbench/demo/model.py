"""The demo's two models: a ResNet classifier and a small SSD that starts from its weights.

The SSD is SSD320 v1.2's architecture at a smaller width, wired from the same parts as
`cvbench.detection.ssd320` (the registry ResNet's C3-C5 through `build_backbone`,
`FeaturePyramid` P3-P7, `WeightSharedHead`), so it has the same anchors
(`multiscale_anchors(image_size)`), outputs, loss, post-processing and evaluation. Two
differences, because the demo trains on two CPU cores in minutes:

- `depth` channels (SSD320: 256) and `head_layers` tower convolutions (SSD320: 4);
- batch-norm momentum 0.9 everywhere (SSD320's pyramid and head: 0.997);
- the input is normalized as the classifier's was (ImageNet mean and standard deviation),
  so the backbone can start from the classifier trained a minute earlier, as SSD320 starts
  from an ImageNet ResNet.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
from keras import layers


def build_classifier(backbone: str, *, num_classes: int, image_size: int) -> keras.Model:
    """The registry ResNet `backbone` with a `num_classes`-way logits head.

    Input: float32 `(B, image_size, image_size, 3)` ImageNet-normalized RGB.
    Output: float32 `(B, num_classes)` logits.
    """
    from cvbench.models import get_model

    return get_model(
        backbone,
        num_classes=num_classes,
        input_shape=(image_size, image_size, 3),
        classifier_activation=None,
    )


def build_demo_ssd(
    *,
    num_classes: int,
    image_size: int,
    backbone: str = "resnet18",
    depth: int = 64,
    head_layers: int = 2,
    freeze_batchnorm: bool = True,
    bn_momentum: float | None = 0.9,
    weight_decay: float = 4e-4,
    mean: Sequence[float] = (123.68, 116.28, 103.53),
    std: Sequence[float] = (58.395, 57.12, 57.385),
) -> keras.Model:
    """A small SSD320-style detector (module docstring).

    Args:
        num_classes: object classes (sigmoid scores, no background class).
        image_size: the square input side (>= 32).
        backbone: a registry ResNet name.
        depth: channels of the pyramid and the head towers.
        head_layers: convolutions per head tower.
        freeze_batchnorm: batch norms use their moving statistics in training too.
        bn_momentum: momentum of every batch norm's moving statistics, or None to keep
            SSD320's (0.997 in the pyramid and head: after the demo's few hundred steps those
            would still be 40% their initial values, and inference would not see what
            training saw).
        weight_decay: L2 weight on every convolution kernel.
        mean: per-channel mean subtracted from the [0, 255] input.
        std: per-channel standard deviation the input is divided by.

    Returns:
        A functional model `(B, S, S, 3)` float in [0, 255] ->
        `{"boxes": (B, N, 4), "classes": (B, N, num_classes)}` float32 (box codes and class
        logits of the `N` anchors of `multiscale_anchors(S)`), named `demo_ssd`.
    """
    from cvbench.detection.anchors import anchors_per_location, feature_map_sizes
    from cvbench.detection.fpn import FeaturePyramid
    from cvbench.detection.heads import WeightSharedHead
    from cvbench.detection.ssd import BACKBONE_LEVELS, MAX_LEVEL, MIN_LEVEL, build_backbone

    hw = (image_size, image_size)
    features = build_backbone(
        backbone, hw, freeze_batchnorm=freeze_batchnorm, weight_decay=weight_decay
    )
    inputs = keras.Input(shape=(*hw, 3), name="images")
    x = layers.Rescaling(
        [1.0 / s for s in std],
        offset=[-m / s for m, s in zip(mean, std, strict=True)],
        name="normalize",
    )(inputs)
    pyramid = FeaturePyramid(
        num_inputs=len(BACKBONE_LEVELS),
        num_extra_levels=MAX_LEVEL - 5,
        depth=depth,
        weight_decay=weight_decay,
        freeze_batchnorm=freeze_batchnorm,
        name="fpn",
    )(features(x))
    expected = feature_map_sizes(hw, min_level=MIN_LEVEL, max_level=MAX_LEVEL)
    actual = [tuple(p.shape[1:3]) for p in pyramid]
    if actual != expected:
        raise ValueError(
            f"backbone {backbone!r} gives pyramid sizes {actual} at {hw}, but the anchors "
            f"assume {expected}"
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
    model = keras.Model(inputs, {"boxes": boxes, "classes": classes}, name="demo_ssd")
    if bn_momentum is not None:
        for layer in model._flatten_layers(include_self=False, recursive=True):
            if isinstance(layer, layers.BatchNormalization):
                layer.momentum = bn_momentum
    return model


def copy_backbone_weights(classifier: keras.Model, detector: keras.Model) -> int:
    """Copies the classifier's weights into the detector's backbone, layer by layer by name.

    Every backbone layer holding weights must have a same-named layer with same-shaped
    weights in the classifier (the classifier's head has no counterpart and is left out).

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
