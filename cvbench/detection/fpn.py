"""Feature pyramid (P3-P7) of SSD320 v1.2: the TF OD API `ssd_resnet_v1_fpn` wiring.

From backbone maps `C3, C4, C5` (finest first):

- `P5 = lateral_5(C5)`: a 1x1 conv with bias, no batch norm, no activation, and no smoothing.
- Top-down, for `l = 4, 3`: `M_l = up2(M_{l+1}) + lateral_l(C_l)` with `M_5 = P5`,
  `up2` = nearest-neighbour x2; `P_l = relu6(bn(conv3x3(M_l)))`. The next level upsamples
  the unsmoothed `M_l` (as `fpn_top_down_feature_maps`).
- Bottom-up extras: `P6 = relu6(bn(conv3x3/2(P5)))`, `P7 = relu6(bn(conv3x3/2(P6)))`
  ('same' padding: `ceil(n / 2)`).

Sizes that are not powers of two: the backbone maps `n -> ceil(n / 2)` per stride, so
`up2(M_{l+1})` can be one row/column larger than `C_l`; it is cropped to `C_l`'s size (its
bottom/right edge), as the OD API does with explicit padding. Level `l` is thus
`ceil(side / 2**l)`, which `anchors.feature_map_sizes` assumes.

Convolutions: truncated normal (stddev 0.03), L2 weight decay `weight_decay` on kernels,
batch norm momentum 0.997 and epsilon 1e-3 (the SSD320 feature-extractor hyperparameters).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import layers, ops

from cvbench.detection.batchnorm import FreezableBatchNormalization

#: Batch-norm hyperparameters of SSD320 v1.2 (decay 0.997, epsilon 0.001).
BN_MOMENTUM = 0.997
BN_EPSILON = 1e-3


def l2_regularizer(weight_decay: float) -> keras.regularizers.Regularizer | None:
    """The OD API's `l2_regularizer { weight: w }` as a Keras regularizer.

    The OD API (slim and its Keras models alike) penalizes `w * sum(kernel**2) / 2`, which is
    Keras' `L2(w / 2)`.

    Args:
        weight_decay: the OD API weight (4e-4 in SSD320 v1.2); 0 for none.

    Returns:
        A `keras.regularizers.L2`, or None for a zero weight.

    Raises:
        ValueError: for a negative weight.
    """
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0; got {weight_decay!r}")
    return keras.regularizers.L2(weight_decay / 2) if weight_decay > 0 else None


def upsample_to(x: Any, reference: Any) -> Any:
    """Nearest-neighbour x2 upsampling of `x`, cropped to `reference`'s height and width.

    Args:
        x: `(B, h, w, C)` map.
        reference: `(B, H, W, C')` map with `H <= 2h` and `W <= 2w`.

    Returns:
        `(B, H, W, C)`.
    """
    y = ops.repeat(ops.repeat(x, 2, axis=1), 2, axis=2)
    return y[:, : reference.shape[1], : reference.shape[2], :]


@keras.saving.register_keras_serializable(package="cvbench")
class FeaturePyramid(keras.layers.Layer):
    """FPN top-down path + stride-2 extra levels (module docstring).

    Call it on a list of backbone maps, finest first (C3, C4, C5); it returns
    `num_inputs + num_extra_levels` maps of `depth` channels, finest first (P3..P7).

    Args:
        num_inputs: number of backbone maps (3: C3, C4, C5).
        num_extra_levels: stride-2 levels added on top (2: P6, P7).
        depth: channels of every output (256).
        weight_decay: OD API L2 weight on conv kernels (4e-4; see `l2_regularizer`).
        freeze_batchnorm: normalize with moving statistics in training too.
        **kwargs: `keras.layers.Layer` arguments (name, dtype).
    """

    def __init__(
        self,
        *,
        num_inputs: int = 3,
        num_extra_levels: int = 2,
        depth: int = 256,
        weight_decay: float = 4e-4,
        freeze_batchnorm: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if num_inputs < 1 or num_extra_levels < 0 or depth < 1:
            raise ValueError(
                f"need num_inputs >= 1, num_extra_levels >= 0, depth >= 1; got {num_inputs!r}, "
                f"{num_extra_levels!r}, {depth!r}"
            )
        self.num_inputs = num_inputs
        self.num_extra_levels = num_extra_levels
        self.depth = depth
        self.weight_decay = weight_decay
        self.freeze_batchnorm = freeze_batchnorm
        conv_kw = {
            "kernel_initializer": keras.initializers.TruncatedNormal(stddev=0.03),
            "kernel_regularizer": l2_regularizer(weight_decay),
            "dtype": self.dtype_policy,
        }
        self.laterals = [
            layers.Conv2D(depth, 1, use_bias=True, name=f"lateral_{i}", **conv_kw)
            for i in range(num_inputs)
        ]
        self.smoothing = [
            self._conv_bn(3, 1, f"smoothing_{i}", conv_kw) for i in range(num_inputs - 1)
        ]
        self.extras = [self._conv_bn(3, 2, f"extra_{i}", conv_kw) for i in range(num_extra_levels)]

    def _conv_bn(
        self, size: int, stride: int, name: str, conv_kw: dict[str, Any]
    ) -> tuple[layers.Conv2D, FreezableBatchNormalization]:
        conv = layers.Conv2D(
            self.depth, size, strides=stride, padding="same", use_bias=False, name=name, **conv_kw
        )
        bn = FreezableBatchNormalization(
            frozen=self.freeze_batchnorm,
            momentum=BN_MOMENTUM,
            epsilon=BN_EPSILON,
            name=f"{name}_bn",
            dtype=self.dtype_policy,
        )
        return conv, bn

    def build(self, input_shape: list[tuple[int | None, ...]]) -> None:
        if len(input_shape) != self.num_inputs:
            raise ValueError(
                f"FeaturePyramid expects {self.num_inputs} maps; got {len(input_shape)}"
            )
        for lateral, shape in zip(self.laterals, input_shape, strict=True):
            lateral.build(shape)
        fpn_shape = (None, None, None, self.depth)
        for conv, bn in self.smoothing + self.extras:
            conv.build(fpn_shape)
            bn.build(fpn_shape)
        self.built = True

    def _conv_bn_relu6(self, pair: tuple[Any, Any], x: Any, training: Any) -> Any:
        conv, bn = pair
        return ops.relu6(bn(conv(x), training=training))

    def call(self, inputs: list[Any], training: Any = None) -> list[Any]:
        top_down = self.laterals[-1](inputs[-1])
        outputs = [top_down]
        for i in reversed(range(self.num_inputs - 1)):
            residual = self.laterals[i](inputs[i])
            top_down = upsample_to(top_down, residual) + residual
            outputs.insert(0, self._conv_bn_relu6(self.smoothing[i], top_down, training))
        last = outputs[-1]
        for pair in self.extras:
            last = self._conv_bn_relu6(pair, last, training)
            outputs.append(last)
        return outputs

    def to_functional(self, input_shape: list[tuple[int | None, ...]]) -> keras.Model:
        """This layer's inference function as a functional model of built-in layers, for
        `cvbench.utils.plain_keras.to_plain_keras`: its own convolutions and batch norms
        (shared, not copied), `UpSampling2D` + `Cropping2D` for `upsample_to`, `Add`, and
        `ReLU(max_value=6)`. Outputs the maps finest first, as `call`.

        Args:
            input_shape: the backbone maps' shapes, as `build` receives them (static sizes).

        Raises:
            ValueError: for a map without a static height or width.
        """
        inputs = functional_inputs(self.name, input_shape)

        def conv_bn_relu6(pair: tuple[Any, Any], x: Any) -> Any:
            conv, bn = pair
            return layers.ReLU(max_value=6.0, name=f"{conv.name}_relu6")(bn(conv(x)))

        top_down = self.laterals[-1](inputs[-1])
        outputs = [top_down]
        for i in reversed(range(self.num_inputs - 1)):
            residual = self.laterals[i](inputs[i])
            up = layers.UpSampling2D(2, interpolation="nearest", name=f"upsample_{i}")(top_down)
            extra = (up.shape[1] - residual.shape[1], up.shape[2] - residual.shape[2])
            if extra != (0, 0):
                up = layers.Cropping2D(((0, extra[0]), (0, extra[1])), name=f"crop_{i}")(up)
            top_down = layers.Add(name=f"top_down_{i}")([up, residual])
            outputs.insert(0, conv_bn_relu6(self.smoothing[i], top_down))
        last = outputs[-1]
        for pair in self.extras:
            last = conv_bn_relu6(pair, last)
            outputs.append(last)
        return keras.Model(inputs, outputs, name=self.name)

    def compute_output_shape(self, input_shape: list[tuple[int | None, ...]]) -> list[tuple]:
        shapes = [(*shape[:3], self.depth) for shape in input_shape]
        batch, h, w, _ = shapes[-1]
        for _ in range(self.num_extra_levels):
            h = None if h is None else -(-h // 2)
            w = None if w is None else -(-w // 2)
            shapes.append((batch, h, w, self.depth))
        return shapes

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_inputs": self.num_inputs,
            "num_extra_levels": self.num_extra_levels,
            "depth": self.depth,
            "weight_decay": self.weight_decay,
            "freeze_batchnorm": self.freeze_batchnorm,
        }


def functional_inputs(name: str, input_shape: list[tuple[int | None, ...]]) -> list[Any]:
    """`keras.Input`s for the maps of a composite layer's `to_functional` (`{name}_input_{i}`).

    Raises:
        ValueError: for a map without a static height or width.
    """
    if any(None in tuple(shape[1:3]) for shape in input_shape):
        raise ValueError(f"to_functional needs static map sizes; got {input_shape!r}")
    return [
        keras.Input(tuple(shape[1:]), name=f"{name}_input_{i}")
        for i, shape in enumerate(input_shape)
    ]
