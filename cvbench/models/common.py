"""Pieces every classification builder shares: argument checks, the input and the head.

All builders are channels-last and take RGB images. The classifier (`predictions`) is a
`Dense` layer with `dtype="float32"`, so under a `mixed_float16` / `mixed_bfloat16` policy
the logits and the softmax are computed (and returned) in float32 while the backbone runs in
the policy's compute dtype; variables are float32 under every policy.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import keras
from keras import layers

# Values of the `pooling` argument (used with include_top=False).
POOLINGS = (None, "avg", "max")

# What the `conv_initializer` / `dense_initializer` knobs accept.
InitializerSpec = str | dict | keras.initializers.Initializer

# cvbench's initializer aliases (see `initializer`); each call makes a new initializer.
INITIALIZER_ALIASES = {
    "fan_out": lambda: keras.initializers.VarianceScaling(
        scale=2.0, mode="fan_out", distribution="untruncated_normal"
    ),
    "fan_in_truncated": lambda: keras.initializers.VarianceScaling(
        scale=2.0, mode="fan_in", distribution="truncated_normal"
    ),
    "normal_0.01": lambda: keras.initializers.RandomNormal(mean=0.0, stddev=0.01),
}


def check_input_shape(
    input_shape: Sequence[int | None], *, min_size: int, model_name: str
) -> tuple[int | None, int | None, int]:
    """Validates a channels-last image shape and returns it as a tuple.

    Args:
        input_shape: `(height, width, channels)`; height and width may be `None` (any size).
        min_size: the smallest height/width the network accepts.
        model_name: used in error messages.

    Returns:
        `(height, width, 3)`.

    Raises:
        ValueError: if the shape is not 3 long, the channel count is not 3, or a known
            spatial size is below `min_size`, naming the received value.
    """
    if keras.config.image_data_format() != "channels_last":
        raise ValueError(
            f"{model_name} is built channels-last; got "
            f"keras.config.image_data_format()={keras.config.image_data_format()!r}"
        )
    try:
        shape = tuple(input_shape)
    except TypeError:
        shape = ()
    if len(shape) != 3:
        raise ValueError(
            f"{model_name}: input_shape must be (height, width, channels); got {input_shape!r}"
        )
    height, width, channels = (
        int(d) if isinstance(d, numbers.Integral) and not isinstance(d, bool) else d for d in shape
    )
    shape = (height, width, channels)
    if channels != 3:
        raise ValueError(
            f"{model_name} takes RGB images with 3 channels; got input_shape={shape!r} "
            f"({channels} channels)"
        )
    for size in (height, width):
        if size is not None and not isinstance(size, int):
            raise ValueError(
                f"{model_name}: height and width must be ints or None; got input_shape={shape!r}"
            )
        if size is not None and size < min_size:
            raise ValueError(
                f"{model_name} needs images of at least {min_size}x{min_size}; got "
                f"input_shape={shape!r}"
            )
    return height, width, channels


def check_head_args(*, include_top: bool, num_classes: int, pooling: str | None) -> None:
    """Validates `include_top`, `num_classes` and `pooling`.

    Raises:
        ValueError: naming the bad value.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}; got {pooling!r}")
    if include_top:
        if pooling is not None:
            raise ValueError(
                f"pooling={pooling!r} applies only with include_top=False (the classifier "
                "always average-pools)"
            )
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int; got {num_classes!r}")


def head(
    x: keras.KerasTensor,
    *,
    include_top: bool,
    num_classes: int,
    pooling: str | None,
    classifier_activation: str | None,
    dense_initializer: InitializerSpec = "normal_0.01",
) -> keras.KerasTensor:
    """Adds the classifier or the optional pooling to backbone features.

    Args:
        x: backbone features, `(batch, h, w, c)`.
        include_top: add global average pooling and the `predictions` Dense layer.
        num_classes: width of `predictions`.
        pooling: with `include_top=False`: `None` (return the 4-D map), `"avg"` or `"max"`.
        classifier_activation: activation of `predictions`; `None` returns logits.
        dense_initializer: kernel initializer of `predictions` (see `initializer`); its bias
            starts at zero.

    Returns:
        `(batch, num_classes)` float32 with `include_top`; `(batch, c)` with pooling;
        otherwise `x` unchanged.
    """
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        # float32 whatever the global policy: logits and softmax in full precision.
        return layers.Dense(
            num_classes,
            activation=classifier_activation,
            kernel_initializer=initializer(dense_initializer),
            dtype="float32",
            name="predictions",
        )(x)
    if pooling == "avg":
        return layers.GlobalAveragePooling2D(name="avg_pool")(x)
    if pooling == "max":
        return layers.GlobalMaxPooling2D(name="max_pool")(x)
    return x


def initializer(spec: InitializerSpec) -> keras.initializers.Initializer:
    """A Keras initializer from a cvbench alias, a Keras name / config, or an initializer.

    Aliases (`INITIALIZER_ALIASES`):

    - `"fan_out"`: `VarianceScaling(2.0, "fan_out", "untruncated_normal")`, He normal over
      the output fan (torchvision's `kaiming_normal_(mode="fan_out")`; cvbench's conv default).
    - `"fan_in_truncated"`: `VarianceScaling(2.0, "fan_in", "truncated_normal")`, values cut at
      2 standard deviations (NVIDIA DeepLearningExamples `--weight_init=fan_in`).
    - `"normal_0.01"`: `RandomNormal(0, 0.01)` (cvbench's classifier default, torchvision's FC).

    Args:
        spec: an alias above, anything `keras.initializers.get` accepts (`"glorot_uniform"`,
            a config dict), or an `Initializer` (used as given).

    Returns:
        A new initializer (for an alias or a name) or `spec` itself.

    Raises:
        ValueError: for a name Keras does not know, naming it and the aliases.
    """
    if isinstance(spec, keras.initializers.Initializer):
        return spec
    if isinstance(spec, str) and spec in INITIALIZER_ALIASES:
        return INITIALIZER_ALIASES[spec]()
    try:
        return keras.initializers.get(spec)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"unknown initializer {spec!r}: use a Keras initializer (name, config or object) or "
            f"one of {sorted(INITIALIZER_ALIASES)}"
        ) from e


def check_batchnorm_args(*, momentum: float, epsilon: float, scale: bool) -> None:
    """Validates the batch-norm knobs shared by the builders.

    Raises:
        ValueError: for a momentum outside [0, 1), an epsilon <= 0, or a non-bool scale.
    """
    if (
        isinstance(momentum, bool)
        or not isinstance(momentum, numbers.Real)
        or not (0.0 <= momentum < 1.0)
    ):
        raise ValueError(f"bn_momentum must be a number in [0, 1); got {momentum!r}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not epsilon > 0:
        raise ValueError(f"bn_epsilon must be a positive number; got {epsilon!r}")
    if not isinstance(scale, bool):
        raise ValueError(f"bn_scale must be True or False; got {scale!r}")


def conv_initializer(spec: InitializerSpec = "fan_out") -> keras.initializers.Initializer:
    """The convolution kernel initializer: `initializer(spec)`, by default He normal fan-out
    (the torchvision / NVIDIA PyTorch initialisation for ReLU convs)."""
    return initializer(spec)
