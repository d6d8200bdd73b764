"""ResNet-18/34/50/101/152, v1 and v1.5, with keras.applications layer names.

Layout (channels-last, RGB):

- Stem: `conv1_pad` (3 px zeros), `conv1_conv` 7x7/2 with 64 filters, `conv1_bn`,
  `conv1_relu`, `pool1_pad` (1 px), `pool1_pool` 3x3/2 max pool: stride 4 in all.
- Stages `conv2`..`conv5` with 64, 128, 256, 512 bottleneck filters (4x that many output
  channels for bottleneck blocks); the first block of stages 3-5 halves the resolution.
  Stage outputs C2..C5 have strides 4, 8, 16, 32 (see `feature_layer_names`).
- Bottleneck block `conv{stage}_block{i}`: `_1_conv` 1x1, `_2_conv` 3x3, `_3_conv` 1x1, each
  followed by `_bn` (and `_relu` for the first two), an optional projection shortcut
  `_0_conv` + `_0_bn` (first block of a stage), `_add` and `_out` (ReLU).
  `variant="v1.5"` (NVIDIA / torchvision) puts the stride 2 in `_2_conv` (padded explicitly
  by `_2_pad`, one pixel each side); `variant="v1"` (the original paper and
  keras.applications) puts it in `_1_conv`. The shortcut `_0_conv` is 1x1/2 in both.
- Basic block (ResNet-18/34): `_1_conv` 3x3 (carries the stride), `_2_conv` 3x3, projection
  shortcut only where the stride or the width changes. v1 and v1.5 coincide here.

Every convolution is followed by batch norm (epsilon 1.001e-5, as keras.applications), so a
convolution bias is redundant; `conv_bias=False` (the default) drops it. `conv_bias=True`
reproduces the keras.applications layout exactly. keras.applications ResNet weight files load
into both: into a model without conv biases each bias is folded into the next batch norm's
moving mean, which gives the same function (`weights.load_weights`). Their stem is permuted
to take RGB (`rgb_stem`): every cvbench ResNet takes RGB.

Sizes that are not multiples of 32 work: every stride-2 layer maps a size `n` to `ceil(n/2)`
on both the main path and the shortcut.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras
from keras import layers

from cvbench.models import common, pretrained
from cvbench.models import weights as weights_lib
from cvbench.models.batchnorm import FusedBatchNormalization
from cvbench.models.layers import FastConv2D


@dataclass(frozen=True)
class Depth:
    """One ResNet depth: blocks per stage (conv2..conv5), the block kind, and a note for its
    builder's docstring."""

    blocks: tuple[int, int, int, int]
    bottleneck: bool
    note: str = ""


# The depths (He et al. 2016, table 1): each one is a public builder `resnet{depth}` below.
DEPTHS: dict[int, Depth] = {
    18: Depth((2, 2, 2, 2), bottleneck=False),
    34: Depth((3, 4, 6, 3), bottleneck=False),
    50: Depth(
        (3, 4, 6, 3),
        bottleneck=True,
        note="25,557,032 trainable parameters at 1000 classes without conv bias (v1 and v1.5).",
    ),
    101: Depth((3, 4, 23, 3), bottleneck=True),
    152: Depth((3, 8, 36, 3), bottleneck=True),
}
# Blocks per stage (conv2..conv5) for each depth.
STAGE_BLOCKS: dict[int, tuple[int, int, int, int]] = {d: s.blocks for d, s in DEPTHS.items()}
STAGE_FILTERS = (64, 128, 256, 512)
VARIANTS = ("v1", "v1.5")
BN_EPSILON = 1.001e-5
# Smallest input: the total stride, so that C5 is at least 1x1 from real pixels.
MIN_SIZE = 32


def feature_layer_names(model_or_depth: keras.Model | int) -> dict[str, str]:
    """Names of the stage-output layers C2..C5 (strides 4, 8, 16, 32).

    Use `model.get_layer(name).output` to build a feature pyramid backbone:

        >>> feature_layer_names(50)["C3"]
        'conv3_block4_out'

    Args:
        model_or_depth: a model built by this module (any input size, with or without the
            top), or a depth in `STAGE_BLOCKS`.

    Returns:
        `{"C2": ..., "C3": ..., "C4": ..., "C5": ...}`, in that order.

    Raises:
        ValueError: for an unknown depth, or a model without these layers.
    """
    if isinstance(model_or_depth, int) and not isinstance(model_or_depth, bool):
        if model_or_depth not in STAGE_BLOCKS:
            raise ValueError(
                f"unknown ResNet depth {model_or_depth!r}; known: {sorted(STAGE_BLOCKS)}"
            )
        blocks = STAGE_BLOCKS[model_or_depth]
    else:
        names = {layer.name for layer in model_or_depth.layers}
        blocks = []
        for stage in range(2, 6):
            count = 0
            while f"conv{stage}_block{count + 1}_out" in names:
                count += 1
            if count == 0:
                raise ValueError(
                    f"model {model_or_depth.name!r} has no layer 'conv{stage}_block1_out'; "
                    "it was not built by cvbench.models.resnet"
                )
            blocks.append(count)
    return {
        f"C{stage}": f"conv{stage}_block{count}_out"
        for stage, count in zip(range(2, 6), blocks, strict=True)
    }


def _conv(
    x: keras.KerasTensor,
    filters: int,
    size: int,
    stride: int,
    use_bias: bool,
    name: str,
    init: common.InitializerSpec,
) -> keras.KerasTensor:
    """Conv with symmetric padding: `same` at stride 1, explicit 1-pixel pad at stride 2.

    TF's `same` at stride 2 pads only bottom/right on even sizes; the explicit pad keeps the
    torchvision / NVIDIA alignment. Both give `ceil(n / stride)` outputs.
    """
    padding = "same"
    if stride > 1 and size > 1:
        x = layers.ZeroPadding2D(padding=size // 2, name=f"{name}_pad")(x)
        padding = "valid"
    return FastConv2D(
        filters,
        size,
        strides=stride,
        padding=padding,
        use_bias=use_bias,
        kernel_initializer=common.conv_initializer(init),
        name=f"{name}_conv",
    )(x)


def _bn(x: keras.KerasTensor, bn: dict, name: str) -> keras.KerasTensor:
    """Batch norm with `bn = {"momentum": ..., "epsilon": ..., "scale": ...}`."""
    return FusedBatchNormalization(**bn, name=f"{name}_bn")(x)


def _conv_bn(
    x: keras.KerasTensor,
    filters: int,
    size: int,
    stride: int,
    *,
    name: str,
    use_bias: bool,
    bn: dict,
    init: common.InitializerSpec,
    relu: bool,
) -> keras.KerasTensor:
    x = _bn(_conv(x, filters, size, stride, use_bias, name, init), bn, name)
    if relu:
        x = layers.Activation("relu", name=f"{name}_relu")(x)
    return x


def _bottleneck_block(
    x: keras.KerasTensor,
    filters: int,
    stride: int,
    *,
    project: bool,
    name: str,
    s: _BlockSettings,
) -> keras.KerasTensor:
    """Bottleneck block: (batch, h, w, c) -> (batch, ceil(h/stride), ceil(w/stride), 4*filters)."""
    kw = {"use_bias": s.use_bias, "bn": s.bn, "init": s.init}
    shortcut = x
    if project:
        shortcut = _conv_bn(x, 4 * filters, 1, stride, name=f"{name}_0", relu=False, **kw)
    stride_1x1, stride_3x3 = (stride, 1) if s.variant == "v1" else (1, stride)
    y = _conv_bn(x, filters, 1, stride_1x1, name=f"{name}_1", relu=True, **kw)
    y = _conv_bn(y, filters, 3, stride_3x3, name=f"{name}_2", relu=True, **kw)
    y = _conv_bn(y, 4 * filters, 1, 1, name=f"{name}_3", relu=False, **kw)
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.Activation("relu", name=f"{name}_out")(y)


def _basic_block(
    x: keras.KerasTensor,
    filters: int,
    stride: int,
    *,
    project: bool,
    name: str,
    s: _BlockSettings,
) -> keras.KerasTensor:
    """Basic block: (batch, h, w, c) -> (batch, ceil(h/stride), ceil(w/stride), filters).

    One 3x3 carries the stride: v1 and v1.5 coincide."""
    kw = {"use_bias": s.use_bias, "bn": s.bn, "init": s.init}
    shortcut = x
    if project:
        shortcut = _conv_bn(x, filters, 1, stride, name=f"{name}_0", relu=False, **kw)
    y = _conv_bn(x, filters, 3, stride, name=f"{name}_1", relu=True, **kw)
    y = _conv_bn(y, filters, 3, 1, name=f"{name}_2", relu=False, **kw)
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.Activation("relu", name=f"{name}_out")(y)


@dataclass(frozen=True)
class _BlockSettings:
    """What every residual block of one model shares: where the stride goes, conv bias,
    batch-norm arguments and the convolution initializer."""

    variant: str
    use_bias: bool
    bn: dict
    init: common.InitializerSpec


def build_resnet(
    *,
    depth: int,
    variant: str | None = None,
    conv_bias: bool = False,
    num_classes: int = 1000,
    input_shape: Sequence[int | None] = (224, 224, 3),
    include_top: bool = True,
    pooling: str | None = None,
    weights: str | os.PathLike | None = None,
    classifier_activation: str | None = "softmax",
    bn_momentum: float = 0.9,
    bn_epsilon: float = BN_EPSILON,
    bn_scale: bool = True,
    conv_initializer: common.InitializerSpec = "fan_out",
    dense_initializer: common.InitializerSpec = "normal_0.01",
) -> keras.Model:
    """Builds a ResNet of any depth in `STAGE_BLOCKS` (see the module docstring).

    Args:
        depth: 18, 34, 50, 101 or 152.
        variant: `"v1.5"` (stride in the 3x3 conv) or `"v1"` (stride in the first 1x1);
            None (the default): `"v1"` for keras.applications' weights (`"imagenet"` or a
            file of theirs, which are ResNet v1), else `"v1.5"`.
        conv_bias: give convolutions a bias (keras.applications layout).
        num_classes: classifier width (with `include_top`).
        input_shape: `(height, width, 3)`; height/width may be `None`; at least 32.
        include_top: add global average pooling and the float32 `predictions` layer.
        pooling: without the top: `None` (4-D C5 map), `"avg"` or `"max"`.
        weights: `None` (random init), `"imagenet"` (keras.applications' ResNet-50/101/152
            file, fetched and cached by `pretrained.imagenet_weights`; ResNet v1; another
            `num_classes` than 1000 gets a new head, stated in one warning line), or a path:
            a keras.applications file (legacy `.h5` or Keras 3 `.weights.h5`, with or
            without top), a cvbench `.weights.h5` file, or a torchvision state dict (`.pth`
            / `.npz`, see `torchvision_weights`). keras.applications' weights were trained
            on caffe-style BGR input: the first convolution's input channels are permuted
            when they load (`rgb_stem`), so the model takes RGB minus the caffe means
            (`pretrained.weights_normalization`).
        classifier_activation: `"softmax"`, another Keras activation, or `None` for logits.
        bn_momentum: batch-norm moving-average momentum (0.9: NVIDIA's decay).
        bn_epsilon: batch-norm epsilon (1.001e-5 as keras.applications; torchvision and
            NVIDIA use 1e-5).
        bn_scale: give batch norms a learned scale gamma (keras.applications' files have it).
        conv_initializer: convolution kernel initializer, a `common.initializer` spec:
            `"fan_out"` (He normal fan-out, the default), `"fan_in_truncated"` (NVIDIA DLE
            `--weight_init=fan_in`), a Keras name such as `"glorot_uniform"`, or an object.
        dense_initializer: classifier kernel initializer: `"normal_0.01"` (the default),
            `"fan_in_truncated"` (DLE), or any Keras initializer.

    Returns:
        A functional `keras.Model` named `resnet{depth}`: `(batch, h, w, 3)` float32 images
        -> `(batch, num_classes)` float32, or the `(batch, ceil(h/32), ceil(w/32), C)` map
        (C = 2048 for bottleneck nets, 512 for ResNet-18/34), or `(batch, C)` with pooling.

    Raises:
        ValueError: for an unknown depth/variant, a bad shape, head, batch-norm or
            initializer argument, `"imagenet"` where keras.applications publishes no file, or
            a weight file that does not fit (naming the layer and shapes).
    """
    if depth not in STAGE_BLOCKS:
        raise ValueError(f"unknown ResNet depth {depth!r}; known: {sorted(STAGE_BLOCKS)}")
    name = f"resnet{depth}"
    # keras.applications' (BGR, ResNet v1) weights: "imagenet" or a file of theirs, for the
    # depths they publish (50, 101, 152; a legacy .h5 of a ResNet-18 is not theirs).
    bgr_weights = pretrained.weights_normalization(name, weights) is not None
    if variant is None:
        variant = "v1" if bgr_weights else "v1.5"
    shape = _check_args(
        name,
        variant=variant,
        input_shape=input_shape,
        head={"include_top": include_top, "num_classes": num_classes, "pooling": pooling},
        bn={"momentum": bn_momentum, "epsilon": bn_epsilon, "scale": bn_scale},
        initializers=(conv_initializer, dense_initializer),
        weights=weights,
    )
    settings = _BlockSettings(
        variant=variant,
        use_bias=conv_bias,
        bn={"momentum": bn_momentum, "epsilon": bn_epsilon, "scale": bn_scale},
        init=conv_initializer,
    )
    inputs = keras.Input(shape=shape, name="input_layer")
    x = _stages(_stem(inputs, settings), depth, settings)
    outputs = common.head(
        x,
        include_top=include_top,
        num_classes=num_classes,
        pooling=pooling,
        classifier_activation=classifier_activation,
        dense_initializer=dense_initializer,
    )
    model = keras.Model(inputs, outputs, name=name)
    if weights == pretrained.IMAGENET:
        weights = pretrained.imagenet_file(name, include_top=include_top, num_classes=num_classes)
    if weights is not None:
        _warn_v1_file_into_v15(weights, depth=depth, variant=variant)
        weights_lib.load_weights(model, weights, match="name")
    if bgr_weights:
        rgb_stem(model)
    return model


def _check_args(
    name: str,
    *,
    variant: str,
    input_shape: Sequence[int | None],
    head: dict,
    bn: dict,
    initializers: tuple[common.InitializerSpec, common.InitializerSpec],
    weights: str | os.PathLike | None,
) -> tuple[int | None, int | None, int]:
    """Checks every builder argument before a layer is built; returns the input shape."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}")
    shape = common.check_input_shape(input_shape, min_size=MIN_SIZE, model_name=name)
    common.check_head_args(**head)
    common.check_batchnorm_args(**bn)
    for spec in initializers:
        common.initializer(spec)  # fail before building on a bad name
    if weights == pretrained.IMAGENET:
        pretrained.check_imagenet_args(
            name,
            include_top=head["include_top"],
            num_classes=head["num_classes"],
            bn_scale=bn["scale"],
            variant=variant,
        )
    return shape


def _stem(inputs: keras.KerasTensor, settings: _BlockSettings) -> keras.KerasTensor:
    """`conv1` 7x7/2 + batch norm + ReLU, then the 3x3/2 max pool: stride 4 in all."""
    x = layers.ZeroPadding2D(padding=3, name="conv1_pad")(inputs)
    x = FastConv2D(
        64,
        7,
        strides=2,
        use_bias=settings.use_bias,
        kernel_initializer=common.conv_initializer(settings.init),
        name="conv1_conv",
    )(x)
    x = _bn(x, settings.bn, "conv1")
    x = layers.Activation("relu", name="conv1_relu")(x)
    x = layers.ZeroPadding2D(padding=1, name="pool1_pad")(x)
    return layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)


def _stages(x: keras.KerasTensor, depth: int, settings: _BlockSettings) -> keras.KerasTensor:
    """Stages conv2..conv5 of `depth`'s blocks; the first block of stages 3-5 has stride 2
    and a projection shortcut wherever the stride or the width changes."""
    block_fn = _bottleneck_block if DEPTHS[depth].bottleneck else _basic_block
    expansion = 4 if DEPTHS[depth].bottleneck else 1
    channels = 64
    for stage, (filters, blocks) in enumerate(
        zip(STAGE_FILTERS, STAGE_BLOCKS[depth], strict=True), start=2
    ):
        for i in range(1, blocks + 1):
            stride = 2 if (i == 1 and stage > 2) else 1
            project = stride != 1 or channels != expansion * filters
            x = block_fn(
                x, filters, stride, project=project, name=f"conv{stage}_block{i}", s=settings
            )
            channels = expansion * filters
    return x


def _warn_v1_file_into_v15(weights: str | os.PathLike, *, depth: int, variant: str) -> None:
    """Warns when keras.applications' ResNet v1 weights load into a v1.5 bottleneck model:
    the layers fit, but the stride sits in another convolution, so the function differs."""
    if (
        variant == "v1.5"
        and DEPTHS[depth].bottleneck
        and weights_lib.is_keras_applications_file(weights)
    ):
        warnings.warn(
            f"loading {os.fspath(weights)!r} (a keras.applications-format file, i.e. "
            "ResNet v1 weights) into variant='v1.5'; use variant='v1' for the same function",
            stacklevel=4,
        )


def rgb_stem(model: keras.Model) -> None:
    """Reverses the input-channel axis of the first convolution's kernel, in place: a model
    with weights trained on BGR images (keras.applications' ResNets, caffe-style) then
    gives on an RGB image what it gave on the same image in BGR, `conv(x, k[..., ::-1, :])`
    on RGB `x` being `conv(x[..., ::-1], k)`."""
    kernel = model.get_layer("conv1_conv").kernel
    kernel.assign(keras.ops.flip(kernel, axis=2))


def _depth_builder(depth: int) -> Callable[..., keras.Model]:
    """The public builder `resnet{depth}`: `build_resnet(depth=depth, ...)` with the same
    keyword-only arguments (less `depth`), signature and docstring for every depth in
    `DEPTHS`, so the five depths are one table rather than five copies."""
    spec = DEPTHS[depth]

    def builder(*args: Any, **kwargs: Any) -> keras.Model:
        _BUILDER_SIGNATURE.bind(*args, **kwargs)  # TypeError for what resnet50(...) refuses
        return build_resnet(depth=depth, **kwargs)

    name = f"resnet{depth}"
    builder.__name__ = builder.__qualname__ = name
    builder.__module__ = __name__
    builder.__signature__ = _BUILDER_SIGNATURE  # type: ignore[attr-defined]
    kind = "bottleneck" if spec.bottleneck else "basic"
    blocks = "-".join(str(n) for n in spec.blocks)
    builder.__doc__ = (
        f"ResNet-{depth} ({kind} blocks, {blocks}). Arguments and returns as `build_resnet`."
        + (f"\n\n    {spec.note}\n    " if spec.note else "")
    )
    return builder


_BUILD_SIGNATURE = inspect.signature(build_resnet)
_BUILDER_SIGNATURE = _BUILD_SIGNATURE.replace(
    parameters=[p for p in _BUILD_SIGNATURE.parameters.values() if p.name != "depth"]
)

resnet18 = _depth_builder(18)
resnet34 = _depth_builder(34)
resnet50 = _depth_builder(50)
resnet101 = _depth_builder(101)
resnet152 = _depth_builder(152)
