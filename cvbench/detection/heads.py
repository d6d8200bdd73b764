"""Weight-shared box and class head of SSD320 v1.2 (OD API `WeightSharedConvolutionalBoxPredictor`).

Two separate towers (box and class), each `num_layers` x (conv `kernel_size` x `depth`, no
bias -> batch norm -> ReLU6), then a predictor conv (with bias): `A * 4` box codes or
`A * num_classes` class logits per location, `A` anchors per location. Every convolution is
shared by all pyramid levels; the batch norms are not (one per level and tower layer), as in
the OD API. Initializers: normal, stddev 0.01; class bias `-4.6` (prior `sigmoid(-4.6)`, about
0.01); L2 weight decay on conv kernels.

Output order: levels finest first; within a level row-major (y, then x); within a location
anchor `a` of the predictor channels `[a * 4, a * 4 + 4)` (boxes) and
`[a * C, a * C + C)` (classes). That is the order of `anchors.multiscale_anchors`.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import layers, ops

from cvbench.detection.batchnorm import FreezableBatchNormalization
from cvbench.detection.fpn import BN_EPSILON, BN_MOMENTUM, functional_inputs, l2_regularizer

#: Class-logit bias of SSD320 v1.2 (`class_prediction_bias_init`).
CLASS_BIAS_INIT = -4.6


@keras.saving.register_keras_serializable(package="cvbench")
class WeightSharedHead(keras.layers.Layer):
    """Box and class predictions for every anchor of every pyramid level.

    Call it on the list of pyramid maps (finest first, the same channels each); it returns
    `(box_codes, class_logits)`, float32 `(B, N, 4)` and `(B, N, num_classes)`, whatever the
    dtype policy.

    Args:
        num_classes: classes predicted per anchor (sigmoid; no background class).
        num_levels: number of pyramid levels (5 for P3-P7).
        anchors_per_location: `A` (6: 3 aspect ratios x 2 scales).
        depth: channels of the tower convolutions (256).
        num_layers: tower convolutions before each predictor (4).
        kernel_size: kernel of every convolution (3).
        class_bias_init: initial bias of the class logits (-4.6).
        weight_decay: OD API L2 weight on conv kernels (4e-4; see `fpn.l2_regularizer`).
        freeze_batchnorm: normalize with moving statistics in training too.
        **kwargs: `keras.layers.Layer` arguments (name, dtype).
    """

    def __init__(
        self,
        *,
        num_classes: int,
        num_levels: int = 5,
        anchors_per_location: int = 6,
        depth: int = 256,
        num_layers: int = 4,
        kernel_size: int = 3,
        class_bias_init: float = CLASS_BIAS_INIT,
        weight_decay: float = 4e-4,
        freeze_batchnorm: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        for key, value, low in (
            ("num_classes", num_classes, 1),
            ("num_levels", num_levels, 1),
            ("anchors_per_location", anchors_per_location, 1),
            ("depth", depth, 1),
            ("num_layers", num_layers, 0),
            ("kernel_size", kernel_size, 1),
        ):
            if isinstance(value, bool) or not (isinstance(value, int) and value >= low):
                raise ValueError(f"{key} must be an int >= {low}; got {value!r}")
        self.num_classes = num_classes
        self.num_levels = num_levels
        self.anchors_per_location = anchors_per_location
        self.depth = depth
        self.num_layers = num_layers
        self.kernel_size = kernel_size
        self.class_bias_init = float(class_bias_init)
        self.weight_decay = weight_decay
        self.freeze_batchnorm = freeze_batchnorm

        conv_kw = {
            "padding": "same",
            "kernel_initializer": keras.initializers.RandomNormal(stddev=0.01),
            "kernel_regularizer": l2_regularizer(weight_decay),
            "dtype": self.dtype_policy,
        }
        self.box_tower = self._tower("box", conv_kw)
        self.class_tower = self._tower("class", conv_kw)
        self.box_predictor = layers.Conv2D(
            anchors_per_location * 4, kernel_size, name="box_predictor", **conv_kw
        )
        self.class_predictor = layers.Conv2D(
            anchors_per_location * num_classes,
            kernel_size,
            bias_initializer=keras.initializers.Constant(self.class_bias_init),
            name="class_predictor",
            **conv_kw,
        )

    def _tower(self, kind: str, conv_kw: dict[str, Any]) -> list[tuple[Any, list[Any]]]:
        tower = []
        for i in range(self.num_layers):
            conv = layers.Conv2D(
                self.depth, self.kernel_size, use_bias=False, name=f"{kind}_tower_{i}", **conv_kw
            )
            norms = [
                FreezableBatchNormalization(
                    frozen=self.freeze_batchnorm,
                    momentum=BN_MOMENTUM,
                    epsilon=BN_EPSILON,
                    name=f"{kind}_tower_{i}_bn_level_{level}",
                    dtype=self.dtype_policy,
                )
                for level in range(self.num_levels)
            ]
            tower.append((conv, norms))
        return tower

    def build(self, input_shape: list[tuple[int | None, ...]]) -> None:
        if len(input_shape) != self.num_levels:
            raise ValueError(
                f"WeightSharedHead expects {self.num_levels} maps; got {len(input_shape)}"
            )
        channels = {shape[-1] for shape in input_shape}
        if len(channels) != 1:
            raise ValueError(f"all pyramid maps need the same channels; got {sorted(channels)}")
        in_shape = (None, None, None, channels.pop())
        tower_shape = (None, None, None, self.depth)
        for tower in (self.box_tower, self.class_tower):
            shape = in_shape
            for conv, norms in tower:
                conv.build(shape)
                for bn in norms:
                    bn.build(tower_shape)
                shape = tower_shape
        predictor_shape = tower_shape if self.num_layers else in_shape
        self.box_predictor.build(predictor_shape)
        self.class_predictor.build(predictor_shape)
        self.built = True

    @staticmethod
    def _run_tower(tower: list, x: Any, level: int, training: Any) -> Any:
        for conv, norms in tower:
            x = ops.relu6(norms[level](conv(x), training=training))
        return x

    def call(self, inputs: list[Any], training: Any = None) -> tuple[Any, Any]:
        boxes, classes = [], []
        for level, x in enumerate(inputs):
            locations = x.shape[1] * x.shape[2] * self.anchors_per_location
            b = self.box_predictor(self._run_tower(self.box_tower, x, level, training))
            c = self.class_predictor(self._run_tower(self.class_tower, x, level, training))
            boxes.append(ops.reshape(ops.cast(b, "float32"), (-1, locations, 4)))
            classes.append(ops.reshape(ops.cast(c, "float32"), (-1, locations, self.num_classes)))
        return ops.concatenate(boxes, axis=1), ops.concatenate(classes, axis=1)

    def to_functional(self, input_shape: list[tuple[int | None, ...]]) -> keras.Model:
        """This layer's inference function as a functional model of built-in layers, for
        `cvbench.utils.plain_keras.to_plain_keras`: its own convolutions (shared by the
        levels) and batch norms, `ReLU(max_value=6)`, `Reshape` and `Concatenate`. Outputs
        `[box_codes (B, N, 4), class_logits (B, N, num_classes)]`, the order of `call`.

        Args:
            input_shape: the pyramid maps' shapes, as `build` receives them (static sizes).

        Raises:
            ValueError: for a map without a static height or width.
        """
        inputs = functional_inputs(self.name, input_shape)
        boxes, classes = [], []
        for level, x in enumerate(inputs):
            locations = x.shape[1] * x.shape[2] * self.anchors_per_location
            for kind, tower, predictor, width, out in (
                ("box", self.box_tower, self.box_predictor, 4, boxes),
                ("class", self.class_tower, self.class_predictor, self.num_classes, classes),
            ):
                y = x
                for i, (conv, norms) in enumerate(tower):
                    relu6 = layers.ReLU(max_value=6.0, name=f"{kind}_tower_{i}_relu6_level_{level}")
                    y = relu6(norms[level](conv(y)))
                reshape = layers.Reshape((locations, width), name=f"{kind}_reshape_level_{level}")
                out.append(reshape(predictor(y)))
        outputs = [
            layers.Concatenate(axis=1, name=f"{kind}_concat")(parts) if len(parts) > 1 else parts[0]
            for kind, parts in (("box", boxes), ("class", classes))
        ]
        return keras.Model(inputs, outputs, name=self.name)

    def compute_output_shape(self, input_shape: list[tuple[int | None, ...]]) -> tuple:
        n = sum(s[1] * s[2] * self.anchors_per_location for s in input_shape)
        batch = input_shape[0][0]
        return (batch, n, 4), (batch, n, self.num_classes)

    def compute_output_spec(self, inputs: list[Any], training: Any = None) -> tuple:
        box_shape, class_shape = self.compute_output_shape([x.shape for x in inputs])
        return (
            keras.KerasTensor(box_shape, dtype="float32"),
            keras.KerasTensor(class_shape, dtype="float32"),
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "num_levels": self.num_levels,
            "anchors_per_location": self.anchors_per_location,
            "depth": self.depth,
            "num_layers": self.num_layers,
            "kernel_size": self.kernel_size,
            "class_bias_init": self.class_bias_init,
            "weight_decay": self.weight_decay,
            "freeze_batchnorm": self.freeze_batchnorm,
        }
