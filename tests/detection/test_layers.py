"""FPN, weight-shared head and freezable batch norm: wiring, order, sizes, configs."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from cvbench.detection.anchors import feature_map_sizes, multiscale_anchors
from cvbench.detection.batchnorm import FreezableBatchNormalization
from cvbench.detection.fpn import FeaturePyramid
from cvbench.detection.heads import WeightSharedHead
from cvbench.utils.model_layers import all_layers

pytestmark = pytest.mark.backend_agnostic


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_head_output_order_is_the_anchor_order():
    """Output n of the head is computed at the grid cell and anchor slot of anchor n.

    A 1x1 predictor without tower copies the input channels (row, column, level) into the
    first three box outputs and writes the anchor slot into the fourth (through the bias);
    the same facts are recovered from the anchors' geometry.
    """
    size = (136, 200)  # not a multiple of 128, not square: 17x25, 9x13, 5x7, 3x4, 2x2
    sizes = feature_map_sizes(size)
    head = WeightSharedHead(
        num_classes=1, num_layers=0, kernel_size=1, anchors_per_location=6, weight_decay=0.0
    )
    maps = []
    for level, (h, w) in enumerate(sizes):
        rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        maps.append(np.stack([rows, cols, np.full_like(rows, level)], -1)[None].astype("float32"))
    head(maps)  # build
    kernel = np.zeros((1, 1, 3, 24), np.float32)
    bias = np.zeros((24,), np.float32)
    for a in range(6):
        kernel[0, 0, 0, 4 * a] = kernel[0, 0, 1, 4 * a + 1] = kernel[0, 0, 2, 4 * a + 2] = 1.0
        bias[4 * a + 3] = a
    head.box_predictor.set_weights([kernel, bias])
    boxes, classes = head(maps)
    got = np.rint(_np(boxes)[0]).astype(int)  # (N, 4): row, column, level index, slot

    anchors = multiscale_anchors(size).astype(np.float64)
    assert got.shape == (anchors.shape[0], 4) and _np(classes).shape == (1, anchors.shape[0], 1)
    height = (anchors[:, 2] - anchors[:, 0]) * size[0]
    width = (anchors[:, 3] - anchors[:, 1]) * size[1]
    # sqrt(h * w) = 4 * 2^level * 2^(k / 2): level and octave scale k from the log.
    log_side = np.log2(np.sqrt(height * width) / 4.0)
    level = np.floor(log_side + 1e-6).astype(int)
    k = np.rint(2 * (log_side - level)).astype(int)
    aspect = np.rint(np.log2(width / height)).astype(int)  # ratios 1, 2, 0.5 -> 0, 1, -1
    slot = np.select([aspect == 0, aspect == 1], [0, 2], 4) + k
    stride = 2.0**level
    offset_y = np.where(size[0] % stride == 0, stride / 2, 0.0)
    offset_x = np.where(size[1] % stride == 0, stride / 2, 0.0)
    row = np.rint(((anchors[:, 0] + anchors[:, 2]) / 2 * size[0] - offset_y) / stride)
    col = np.rint(((anchors[:, 1] + anchors[:, 3]) / 2 * size[1] - offset_x) / stride)
    expected = np.stack([row, col, level - 3, slot], -1).astype(int)
    np.testing.assert_array_equal(got, expected)


def test_head_initial_outputs_and_sharing():
    head = WeightSharedHead(num_classes=3, num_levels=2, depth=8, weight_decay=4e-4)
    maps = [np.zeros((2, 4, 4, 16), "float32"), np.zeros((2, 2, 2, 16), "float32")]
    boxes, classes = head(maps)
    # Zero features: towers give relu6(beta = 0) = 0, predictors give their biases.
    assert boxes.shape == (2, (16 + 4) * 6, 4) and classes.shape == (2, 120, 3)
    np.testing.assert_allclose(_np(boxes), 0.0)
    np.testing.assert_allclose(_np(classes), -4.6, rtol=1e-6)
    # 2 towers x 4 shared convs + 2 predictors; one batch norm per tower layer and level.
    convs = [w for w in head.weights if "kernel" in w.path]
    assert len(convs) == 10
    norms = [x for x in all_layers(head) if isinstance(x, FreezableBatchNormalization)]
    assert len(norms) == 2 * 4 * 2
    assert len(head.losses) == 10  # L2 on every conv kernel


def test_head_outputs_float32_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_bfloat16")
    head = WeightSharedHead(num_classes=2, num_levels=1, depth=4, num_layers=1, kernel_size=1)
    boxes, classes = head([np.ones((1, 2, 2, 4), "float32")])
    assert keras.backend.standardize_dtype(head.box_predictor.compute_dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(boxes.dtype) == "float32"
    assert keras.backend.standardize_dtype(classes.dtype) == "float32"


def test_fpn_sizes_at_odd_sizes_and_top_down_flow():
    # A 120 x 136 image through a ceil-halving backbone: C3..C5 = ceil(side / 8..32).
    hw = (120, 136)
    c = [(math.ceil(hw[0] / s), math.ceil(hw[1] / s)) for s in (8, 16, 32)]
    rng = np.random.default_rng(0)
    inputs = [
        rng.normal(size=(1, h, w, ch)).astype("float32")
        for (h, w), ch in zip(c, (8, 16, 32), strict=True)
    ]
    fpn = FeaturePyramid(depth=8)
    outputs = fpn(inputs)
    assert [tuple(o.shape[1:3]) for o in outputs] == feature_map_sizes(hw)
    assert all(o.shape[-1] == 8 for o in outputs)
    # P5..P7 do not see C3 or C4; P3 sees C5 through the top-down path.
    changed = [inputs[0] + 1.0, inputs[1] + 1.0, inputs[2]]
    again = fpn(changed)
    for i in (2, 3, 4):
        np.testing.assert_allclose(_np(again[i]), _np(outputs[i]))
    moved = fpn([inputs[0], inputs[1], inputs[2] + 1.0])
    assert not np.allclose(_np(moved[0]), _np(outputs[0]))
    # P5 is the bare 1x1 lateral of C5 (no smoothing, no activation): it can be negative.
    assert _np(outputs[2]).min() < 0 and _np(outputs[3]).min() >= 0  # P6 has ReLU6


def test_fpn_weights_and_regularizers():
    fpn = FeaturePyramid(depth=8)
    fpn([np.zeros((1, 8, 8, 4)), np.zeros((1, 4, 4, 4)), np.zeros((1, 2, 2, 4))])
    kernels = [w for w in fpn.weights if "kernel" in w.path]
    biases = [w for w in fpn.weights if w.path.endswith("bias")]
    assert len(kernels) == 3 + 2 + 2  # laterals, smoothing (P3, P4), extras (P6, P7)
    assert len(biases) == 3  # only the laterals have a bias (the others are batch-normed)
    assert len(fpn.losses) == 7
    # The OD API weight w penalizes w * sum(k^2) / 2.
    reg = fpn.laterals[0].kernel_regularizer
    assert reg.get_config()["l2"] == pytest.approx(2e-4)
    with pytest.raises(ValueError, match="expects 3 maps; got 2"):
        FeaturePyramid(depth=8)([np.zeros((1, 8, 8, 4)), np.zeros((1, 4, 4, 4))])


@pytest.mark.parametrize(
    "layer",
    [
        FeaturePyramid(
            num_inputs=2, num_extra_levels=1, depth=16, weight_decay=1e-3, freeze_batchnorm=False
        ),  # fmt: skip
        WeightSharedHead(
            num_classes=7,
            num_levels=3,
            anchors_per_location=2,
            depth=16,
            num_layers=2,
            kernel_size=1,
            class_bias_init=-2.0,
        ),  # fmt: skip
        FreezableBatchNormalization(frozen=True, momentum=0.9, epsilon=1e-2),
    ],
)
def test_get_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config


def test_frozen_batchnorm_keeps_statistics_and_trains_gamma():
    x = np.random.default_rng(0).normal(3.0, 2.0, (16, 4)).astype("float32")
    frozen = FreezableBatchNormalization(frozen=True)
    live = FreezableBatchNormalization(frozen=False)
    y_frozen = frozen(x, training=True)
    live(x, training=True)
    np.testing.assert_allclose(_np(frozen.moving_mean), 0.0)  # not updated
    np.testing.assert_allclose(_np(y_frozen), x / np.sqrt(1 + 1e-3), rtol=1e-5)  # moving stats
    assert not np.allclose(_np(live.moving_mean), 0.0)  # updated
    assert [w.path.split("/")[-1] for w in frozen.trainable_weights] == ["gamma", "beta"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 0}, "num_classes must be an int >= 1; got 0"),
        ({"num_classes": 3, "num_layers": -1}, "num_layers must be an int >= 0"),
        ({"num_classes": 3, "depth": 2.5}, "depth must be an int >= 1; got 2.5"),
    ],
)
def test_head_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WeightSharedHead(**kwargs)
