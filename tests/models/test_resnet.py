"""ResNet specifics: parameter counts, where the stride sits, stage outputs for FPN backbones."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.models.resnet import feature_layer_names
from cvbench.zoo import get_model

# Parameter counts and stride placement are structure only (the same on every backend) and
# need full ResNet-50 builds: TensorFlow only, like two of the three forward sizes.
agnostic = pytest.mark.backend_agnostic

# Output channels of every convolution of ResNet-50 (= batch-norm channels, = conv biases):
#   conv1 64
#   conv2: block1 64 + 64 + 256 + 256 (shortcut), blocks 2-3 (64 + 64 + 256) each -> 1,408
#   conv3: block1 128 + 128 + 512 + 512, blocks 2-4 (128 + 128 + 512) each        -> 3,584
#   conv4: block1 256 + 256 + 1024 + 1024, blocks 2-6 (256 + 256 + 1024) each    -> 10,240
#   conv5: block1 512 + 512 + 2048 + 2048, blocks 2-3 (512 + 512 + 2048) each    -> 11,264
# total 64 + 1,408 + 3,584 + 10,240 + 11,264 = 26,560.
RESNET50_CONV_CHANNELS = 26_560
# Trainable (kernels, BN gamma/beta, classifier) without conv bias: torchvision's and NVIDIA's
# ResNet-50 count.
RESNET50_TRAINABLE = 25_557_032


def _trainable(model: keras.Model) -> int:
    return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


@pytest.fixture(scope="module")
def resnet50_v15() -> keras.Model:
    return get_model("resnet50")  # the defaults: v1.5, no conv bias, 224x224, 1000 classes


@pytest.fixture(scope="module")
def resnet50_keras_layout() -> keras.Model:
    return get_model("resnet50", variant="v1", conv_bias=True)


@pytest.fixture(scope="module")
def backbone() -> keras.Model:
    """The SSD backbone: ResNet-50 v1 without top, any input size."""
    return get_model("resnet50", variant="v1", include_top=False, input_shape=(None, None, 3))


def test_resnet50_v15_parameter_count(resnet50_v15):
    assert _trainable(resnet50_v15) == RESNET50_TRAINABLE
    # Plus batch-norm moving mean and variance: 2 x 26,560 = 53,120 -> 25,610,152.
    assert resnet50_v15.count_params() == RESNET50_TRAINABLE + 2 * RESNET50_CONV_CHANNELS
    assert resnet50_v15.count_params() == 25_610_152


def test_resnet50_keras_applications_layout_parameter_count(resnet50_keras_layout):
    # keras.applications ResNet50: 25,583,592 trainable, 25,636,712 in all (its summary).
    assert _trainable(resnet50_keras_layout) == RESNET50_TRAINABLE + RESNET50_CONV_CHANNELS
    assert _trainable(resnet50_keras_layout) == 25_583_592
    assert resnet50_keras_layout.count_params() == 25_636_712


def _strides(model: keras.Model, name: str) -> tuple[int, int]:
    return tuple(model.get_layer(name).strides)


def test_v15_puts_the_stride_in_the_3x3_conv(resnet50_v15):
    for stage in (3, 4, 5):
        assert _strides(resnet50_v15, f"conv{stage}_block1_1_conv") == (1, 1)
        assert _strides(resnet50_v15, f"conv{stage}_block1_2_conv") == (2, 2)
        assert _strides(resnet50_v15, f"conv{stage}_block1_0_conv") == (2, 2)
        # Symmetric padding before the strided 3x3 (torchvision's padding=1).
        assert resnet50_v15.get_layer(f"conv{stage}_block1_2_pad").padding == ((1, 1), (1, 1))
    for name in ("conv2_block1_1_conv", "conv2_block1_2_conv", "conv3_block2_2_conv"):
        assert _strides(resnet50_v15, name) == (1, 1)


def test_v1_puts_the_stride_in_the_first_1x1_conv(resnet50_keras_layout):
    for stage in (3, 4, 5):
        assert _strides(resnet50_keras_layout, f"conv{stage}_block1_1_conv") == (2, 2)
        assert _strides(resnet50_keras_layout, f"conv{stage}_block1_2_conv") == (1, 1)
        assert _strides(resnet50_keras_layout, f"conv{stage}_block1_0_conv") == (2, 2)
    names = {layer.name for layer in resnet50_keras_layout.layers}
    assert "conv3_block1_2_pad" not in names


@agnostic
def test_basic_blocks_stride_in_the_first_3x3_and_project_only_when_needed():
    model = get_model("resnet18", num_classes=10, input_shape=(64, 64, 3))
    names = {layer.name for layer in model.layers}
    assert _strides(model, "conv3_block1_1_conv") == (2, 2)
    assert tuple(model.get_layer("conv3_block1_1_conv").kernel_size) == (3, 3)
    assert _strides(model, "conv3_block1_2_conv") == (1, 1)
    # conv2 keeps 64 channels at stride 1: identity shortcut; conv3 projects.
    assert "conv2_block1_0_conv" not in names
    assert "conv3_block1_0_conv" in names
    assert feature_layer_names(model) == feature_layer_names(18)


@agnostic
def test_feature_layer_names_by_depth_and_by_model(backbone):
    assert feature_layer_names(50) == {
        "C2": "conv2_block3_out",
        "C3": "conv3_block4_out",
        "C4": "conv4_block6_out",
        "C5": "conv5_block3_out",
    }
    assert feature_layer_names(backbone) == feature_layer_names(50)
    assert feature_layer_names(152)["C4"] == "conv4_block36_out"
    with pytest.raises(ValueError, match="unknown ResNet depth 51"):
        feature_layer_names(51)
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="tiny")
    with pytest.raises(ValueError, match="'tiny' has no layer 'conv2_block1_out'"):
        feature_layer_names(other)


# Size after the stem: conv1 (pad 3, 7x7/2) gives floor((n - 1) / 2) + 1 = ceil(n / 2), the
# max pool (pad 1, 3x3/2) halves again with ceiling; then each stage halves with ceiling.
#   128 -> 64 -> C2 32 -> C3 16 -> C4 8 -> C5 4
#   300 -> 150 -> C2 75 -> C3 38 -> C4 19 -> C5 10
#    97 -> 49 -> C2 25 -> C3 13 -> C4 7 -> C5 4
@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (128, (32, 16, 8, 4)),
        (300, (75, 38, 19, 10)),
        # JAX compiles every new input size: one size, odd, there.
        pytest.param(97, (25, 13, 7, 4), marks=agnostic),
    ],
)
def test_stage_outputs_at_sizes_that_are_not_multiples_of_32(backbone, size, expected):
    names = feature_layer_names(backbone)
    features = keras.Model(backbone.input, [backbone.get_layer(names[c]).output for c in names])
    x = np.random.default_rng(0).normal(size=(1, size, size, 3)).astype("float32")
    outputs = features(x, training=False)
    for out, side, channels in zip(outputs, expected, (256, 512, 1024, 2048), strict=True):
        assert tuple(out.shape) == (1, side, side, channels)
        assert np.isfinite(keras.ops.convert_to_numpy(out)).all()


@agnostic
def test_ssd_input_size_gives_the_recipe_feature_sizes(backbone):
    # SSD320: C3/C4/C5 at strides 8/16/32 of 320 -> 40, 20, 10.
    names = feature_layer_names(backbone)
    levels = ("C3", "C4", "C5")
    features = keras.Model(backbone.input, [backbone.get_layer(names[c]).output for c in levels])
    shapes = features.compute_output_shape((None, 320, 320, 3))
    assert [tuple(s) for s in shapes] == [
        (None, 40, 40, 512),
        (None, 20, 20, 1024),
        (None, 10, 10, 2048),
    ]


@agnostic
@pytest.mark.parametrize(
    ("pooling", "shape"), [(None, (None, 2, 2, 512)), ("avg", (None, 512)), ("max", (None, 512))]
)
def test_pooling_without_top(pooling, shape):
    model = get_model("resnet18", include_top=False, pooling=pooling, input_shape=(64, 64, 3))
    assert model.output_shape == shape


@agnostic
def test_classifier_activation_none_gives_logits():
    model = get_model(
        "resnet18", num_classes=10, input_shape=(64, 64, 3), classifier_activation=None
    )
    x = np.random.default_rng(0).normal(size=(2, 64, 64, 3)).astype("float32")
    logits = keras.ops.convert_to_numpy(model(x, training=False))
    assert logits.dtype == np.float32
    assert not np.allclose(logits.sum(axis=-1), 1.0)
    assert model.get_layer("predictions").get_config()["activation"] == "linear"


@agnostic
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variant": "v2"}, r"variant must be one of \('v1', 'v1.5'\); got 'v2'"),
        ({"input_shape": (31, 64, 3)}, r"at least 32x32; got input_shape=\(31, 64, 3\)"),
        ({"input_shape": (64, 64, 1)}, r"3 channels; got input_shape=\(64, 64, 1\)"),
        ({"input_shape": (64, 64)}, r"got \(64, 64\)"),
        ({"num_classes": 0}, "num_classes must be a positive int; got 0"),
        ({"pooling": "mean", "include_top": False}, "got 'mean'"),
        ({"pooling": "avg"}, "pooling='avg' applies only with include_top=False"),
    ],
)
def test_bad_arguments_raise_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_model("resnet50", **kwargs)


@agnostic
def test_numpy_integer_sizes_are_accepted_and_other_types_refused():
    with pytest.raises(ValueError, match=r"ints or None; got input_shape=\(64.5, 64, 3\)"):
        get_model("resnet18", input_shape=(64.5, 64, 3))
    with pytest.raises(ValueError, match="got 224"):
        get_model("resnet18", input_shape=224)
    model = get_model("resnet18", input_shape=np.array([33, 40, 3]), include_top=False)
    # 33 -> 17 -> 9 -> 5 -> 3 -> 2; 40 -> 20 -> 10 -> 5 -> 3 -> 2 (ceil halvings).
    assert model.output_shape == (None, 2, 2, 512)
