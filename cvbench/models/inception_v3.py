"""Inception V3 (Szegedy et al. 2016), the keras.applications architecture, no auxiliary head.

Every convolution is `conv -> batch norm -> ReLU` (by default: no scale, epsilon 1e-3), named
`{unit}_conv`, `{unit}_bn`, `{unit}_relu`. Stem units `conv1`..`conv5` with max pools `pool1`,
`pool2`; then the blocks `mixed0`..`mixed10` (the concatenation layers carry keras.applications'
names, so `model.get_layer("mixed7")` works as there), with branch units named
`mixed{i}_{branch}` (e.g. `mixed0_branch5x5_2`). Feature maps at 299: 35x35 (mixed0-2),
17x17 (mixed3-7), 8x8 (mixed8-10, 2048 channels).

The graph is built in keras.applications' order, so its layers with weights come in the same
order as in keras.applications' weight files, whose layer names are automatic (`conv2d_17`)
and which Keras itself therefore loads by position.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import keras
from keras import layers

from cvbench.models import common, pretrained
from cvbench.models import weights as weights_lib
from cvbench.models.batchnorm import FusedBatchNormalization
from cvbench.models.layers import FastConv2D

# Three unpadded 3x3 convs (two of stride 2) and two unpadded 3x3/2 pools: below 75 pixels a
# feature map becomes empty. keras.applications states the same minimum.
MIN_SIZE = 75
BN_EPSILON = 1e-3
# `last_block_pooling`: keras.applications' (and the paper's) average, or nvcnn's max.
LAST_BLOCK_POOLINGS = ("average", "max")


@dataclass(frozen=True)
class _Unit:
    """The knobs every conv unit shares: batch norm and the kernel initializer."""

    momentum: float
    epsilon: float
    scale: bool
    init: common.InitializerSpec


def _unit(
    x: keras.KerasTensor,
    filters: int,
    kernel: tuple[int, int],
    *,
    name: str,
    u: _Unit,
    strides: int = 1,
    padding: str = "same",
) -> keras.KerasTensor:
    """conv (no bias) -> batch norm -> ReLU, with the knobs `u`."""
    x = FastConv2D(
        filters,
        kernel,
        strides=strides,
        padding=padding,
        use_bias=False,
        kernel_initializer=common.conv_initializer(u.init),
        name=f"{name}_conv",
    )(x)
    x = FusedBatchNormalization(
        scale=u.scale, momentum=u.momentum, epsilon=u.epsilon, name=f"{name}_bn"
    )(x)
    return layers.Activation("relu", name=f"{name}_relu")(x)


def _pool_branch(
    x: keras.KerasTensor, filters: int, name: str, m: _Unit, pooling: str = "average"
) -> keras.KerasTensor:
    """3x3/1 `same` pooling (average, or max: nvcnn's last block) then a 1x1 unit."""
    pool = layers.AveragePooling2D if pooling == "average" else layers.MaxPooling2D
    y = pool(3, strides=1, padding="same", name=f"{name}_pool")(x)
    return _unit(y, filters, (1, 1), name=f"{name}_branch_pool", u=m)


def _block_a(x: keras.KerasTensor, pool_filters: int, name: str, m: _Unit) -> keras.KerasTensor:
    """35x35 block: 64 + 64 + 96 + pool_filters channels."""
    b1 = _unit(x, 64, (1, 1), name=f"{name}_branch1x1", u=m)
    b5 = _unit(x, 48, (1, 1), name=f"{name}_branch5x5_1", u=m)
    b5 = _unit(b5, 64, (5, 5), name=f"{name}_branch5x5_2", u=m)
    b3 = _unit(x, 64, (1, 1), name=f"{name}_branch3x3dbl_1", u=m)
    b3 = _unit(b3, 96, (3, 3), name=f"{name}_branch3x3dbl_2", u=m)
    b3 = _unit(b3, 96, (3, 3), name=f"{name}_branch3x3dbl_3", u=m)
    bp = _pool_branch(x, pool_filters, name, m)
    return layers.Concatenate(name=name)([b1, b5, b3, bp])


def _reduction_a(x: keras.KerasTensor, name: str, m: _Unit) -> keras.KerasTensor:
    """35x35 -> 17x17: 384 + 96 + input channels (288) = 768."""
    b3 = _unit(x, 384, (3, 3), strides=2, padding="valid", name=f"{name}_branch3x3", u=m)
    bd = _unit(x, 64, (1, 1), name=f"{name}_branch3x3dbl_1", u=m)
    bd = _unit(bd, 96, (3, 3), name=f"{name}_branch3x3dbl_2", u=m)
    bd = _unit(bd, 96, (3, 3), strides=2, padding="valid", name=f"{name}_branch3x3dbl_3", u=m)
    bp = layers.MaxPooling2D(3, strides=2, name=f"{name}_pool")(x)
    return layers.Concatenate(name=name)([b3, bd, bp])


def _block_b(x: keras.KerasTensor, c7: int, name: str, m: _Unit) -> keras.KerasTensor:
    """17x17 block with factorised 7x7 convs of width `c7`: 4 x 192 = 768 channels."""
    b1 = _unit(x, 192, (1, 1), name=f"{name}_branch1x1", u=m)
    b7 = _unit(x, c7, (1, 1), name=f"{name}_branch7x7_1", u=m)
    b7 = _unit(b7, c7, (1, 7), name=f"{name}_branch7x7_2", u=m)
    b7 = _unit(b7, 192, (7, 1), name=f"{name}_branch7x7_3", u=m)
    bd = _unit(x, c7, (1, 1), name=f"{name}_branch7x7dbl_1", u=m)
    bd = _unit(bd, c7, (7, 1), name=f"{name}_branch7x7dbl_2", u=m)
    bd = _unit(bd, c7, (1, 7), name=f"{name}_branch7x7dbl_3", u=m)
    bd = _unit(bd, c7, (7, 1), name=f"{name}_branch7x7dbl_4", u=m)
    bd = _unit(bd, 192, (1, 7), name=f"{name}_branch7x7dbl_5", u=m)
    bp = _pool_branch(x, 192, name, m)
    return layers.Concatenate(name=name)([b1, b7, bd, bp])


def _reduction_b(x: keras.KerasTensor, name: str, m: _Unit) -> keras.KerasTensor:
    """17x17 -> 8x8: 320 + 192 + 768 = 1280 channels."""
    b3 = _unit(x, 192, (1, 1), name=f"{name}_branch3x3_1", u=m)
    b3 = _unit(b3, 320, (3, 3), strides=2, padding="valid", name=f"{name}_branch3x3_2", u=m)
    b7 = _unit(x, 192, (1, 1), name=f"{name}_branch7x7x3_1", u=m)
    b7 = _unit(b7, 192, (1, 7), name=f"{name}_branch7x7x3_2", u=m)
    b7 = _unit(b7, 192, (7, 1), name=f"{name}_branch7x7x3_3", u=m)
    b7 = _unit(b7, 192, (3, 3), strides=2, padding="valid", name=f"{name}_branch7x7x3_4", u=m)
    bp = layers.MaxPooling2D(3, strides=2, name=f"{name}_pool")(x)
    return layers.Concatenate(name=name)([b3, b7, bp])


def _block_c(
    x: keras.KerasTensor, name: str, m: _Unit, pooling: str = "average"
) -> keras.KerasTensor:
    """8x8 block: 320 + 768 + 768 + 192 = 2048 channels; `pooling` of the pool branch."""
    b1 = _unit(x, 320, (1, 1), name=f"{name}_branch1x1", u=m)
    b3 = _unit(x, 384, (1, 1), name=f"{name}_branch3x3_1", u=m)
    b3a = _unit(b3, 384, (1, 3), name=f"{name}_branch3x3_2a", u=m)
    b3b = _unit(b3, 384, (3, 1), name=f"{name}_branch3x3_2b", u=m)
    b3 = layers.Concatenate(name=f"{name}_branch3x3")([b3a, b3b])
    bd = _unit(x, 448, (1, 1), name=f"{name}_branch3x3dbl_1", u=m)
    bd = _unit(bd, 384, (3, 3), name=f"{name}_branch3x3dbl_2", u=m)
    bda = _unit(bd, 384, (1, 3), name=f"{name}_branch3x3dbl_3a", u=m)
    bdb = _unit(bd, 384, (3, 1), name=f"{name}_branch3x3dbl_3b", u=m)
    bd = layers.Concatenate(name=f"{name}_branch3x3dbl")([bda, bdb])
    bp = _pool_branch(x, 192, name, m, pooling)
    return layers.Concatenate(name=name)([b1, b3, bd, bp])


def inception_v3(
    *,
    num_classes: int = 1000,
    input_shape: Sequence[int | None] = (299, 299, 3),
    include_top: bool = True,
    pooling: str | None = None,
    weights: str | os.PathLike | None = None,
    classifier_activation: str | None = "softmax",
    bn_momentum: float = 0.99,
    bn_epsilon: float = BN_EPSILON,
    bn_scale: bool = False,
    conv_initializer: common.InitializerSpec = "fan_out",
    dense_initializer: common.InitializerSpec = "normal_0.01",
    last_block_pooling: str = "average",
) -> keras.Model:
    """Builds Inception V3 without the auxiliary classifier.

    23,851,784 parameters at 1000 classes (23,817,352 trainable), as keras.applications.

    Args:
        num_classes: classifier width (with `include_top`).
        input_shape: `(height, width, 3)`; height/width may be `None`; at least 75.
        include_top: add global average pooling and the float32 `predictions` layer.
        pooling: without the top: `None` (4-D `mixed10` map), `"avg"` or `"max"`.
        weights: `None` (random init), `"imagenet"` (keras.applications' file, fetched and
            cached by `pretrained.imagenet_weights`; another `num_classes` than 1000 gets a
            new head, stated in one warning line), or a path: a keras.applications
            InceptionV3 file (legacy `.h5` or Keras 3 `.weights.h5`, with or without top) or
            a cvbench `.weights.h5` file. keras.applications' weights have no batch-norm
            gamma: with `bn_scale=True` it starts at 1 (the same function). They take
            `x / 127.5 - 1` (`pretrained.weights_normalization`).
        classifier_activation: `"softmax"`, another Keras activation, or `None` for logits.
        bn_momentum: batch-norm moving-average momentum (0.99, the Keras default; nvcnn 0.9).
        bn_epsilon: batch-norm epsilon (1e-3 as keras.applications; nvcnn 1e-4).
        bn_scale: give batch norms a learned scale gamma (keras.applications: none; nvcnn:
            `'scale': True`).
        conv_initializer: convolution kernel initializer (`common.initializer` spec):
            `"fan_out"` (default) or e.g. `"glorot_uniform"` (nvcnn's `_get_variable`).
        dense_initializer: classifier kernel initializer: `"normal_0.01"` (default) or e.g.
            `"glorot_uniform"` (nvcnn).
        last_block_pooling: the pooling of `mixed10`'s pool branch (3x3, stride 1, same):
            `"average"` (keras.applications, the paper) or `"max"` (nvcnn_hvd.py v1.1,
            `inception_v3_e(net, x, 'MAX')` for the last block).

    Returns:
        A functional `keras.Model` named `inception_v3`: `(batch, h, w, 3)` float32 images ->
        `(batch, num_classes)` float32, or the `(batch, h', w', 2048)` map (8x8 at 299), or
        `(batch, 2048)` with pooling.

    Raises:
        ValueError: for a bad shape, head, batch-norm, initializer or pooling argument, or a
            weight file that does not fit.
    """
    shape = common.check_input_shape(input_shape, min_size=MIN_SIZE, model_name="inception_v3")
    _check_args(
        head={"include_top": include_top, "num_classes": num_classes, "pooling": pooling},
        bn={"momentum": bn_momentum, "epsilon": bn_epsilon, "scale": bn_scale},
        initializers=(conv_initializer, dense_initializer),
        last_block_pooling=last_block_pooling,
        weights=weights,
    )
    m = _Unit(bn_momentum, bn_epsilon, bn_scale, conv_initializer)
    inputs = keras.Input(shape=shape, name="input_layer")
    x = _mixed_blocks(_stem(inputs, m), m, last_block_pooling=last_block_pooling)
    outputs = common.head(
        x,
        include_top=include_top,
        num_classes=num_classes,
        pooling=pooling,
        classifier_activation=classifier_activation,
        dense_initializer=dense_initializer,
    )
    model = keras.Model(inputs, outputs, name="inception_v3")
    if weights == pretrained.IMAGENET:
        weights = pretrained.imagenet_file(
            "inception_v3", include_top=include_top, num_classes=num_classes
        )
    if weights is not None:
        weights_lib.load_weights(model, weights, match="order")
    return model


def _check_args(
    *,
    head: dict,
    bn: dict,
    initializers: tuple[common.InitializerSpec, common.InitializerSpec],
    last_block_pooling: str,
    weights: str | os.PathLike | None,
) -> None:
    """Checks the builder's arguments before a layer is built (ValueError naming the value)."""
    common.check_head_args(**head)
    common.check_batchnorm_args(**bn)
    for spec in initializers:
        common.initializer(spec)  # fail before building on a bad name
    if last_block_pooling not in LAST_BLOCK_POOLINGS:
        raise ValueError(
            f"last_block_pooling must be one of {LAST_BLOCK_POOLINGS}; got {last_block_pooling!r}"
        )
    if weights == pretrained.IMAGENET:
        pretrained.check_imagenet_args(
            "inception_v3",
            include_top=head["include_top"],
            num_classes=head["num_classes"],
            bn_scale=bn["scale"],
        )


def _stem(inputs: keras.KerasTensor, m: _Unit) -> keras.KerasTensor:
    """Units `conv1`..`conv5` and pools `pool1`, `pool2`: 299 -> 35x35x192."""
    x = _unit(inputs, 32, (3, 3), strides=2, padding="valid", name="conv1", u=m)
    x = _unit(x, 32, (3, 3), padding="valid", name="conv2", u=m)
    x = _unit(x, 64, (3, 3), name="conv3", u=m)
    x = layers.MaxPooling2D(3, strides=2, name="pool1")(x)
    x = _unit(x, 80, (1, 1), padding="valid", name="conv4", u=m)
    x = _unit(x, 192, (3, 3), padding="valid", name="conv5", u=m)
    return layers.MaxPooling2D(3, strides=2, name="pool2")(x)


def _mixed_blocks(x: keras.KerasTensor, m: _Unit, *, last_block_pooling: str) -> keras.KerasTensor:
    """Blocks `mixed0`..`mixed10`, in keras.applications' order: 35x35 -> 8x8x2048."""
    for i, pool_filters in enumerate((32, 64, 64)):
        x = _block_a(x, pool_filters, f"mixed{i}", m)
    x = _reduction_a(x, "mixed3", m)
    for i, c7 in enumerate((128, 160, 160, 192), start=4):
        x = _block_b(x, c7, f"mixed{i}", m)
    x = _reduction_b(x, "mixed8", m)
    x = _block_c(x, "mixed9", m)
    return _block_c(x, "mixed10", m, last_block_pooling)
