"""The recipe knobs of the builders: batch norm, initializers, Inception V3's last pooling.

Each test checks the exact value a knob sets and would fail if the builder ignored it; the
defaults are checked too (they are the keras.applications-compatible layouts).
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from cvbench.models import common, resnet18
from cvbench.models.inception_v3 import inception_v3

agnostic = pytest.mark.backend_agnostic

# Keras' truncated normal keeps |x| <= 2 stddev and divides the stddev by the standard deviation
# of a unit normal truncated to [-2, 2], 0.87962566103423978 (keras VarianceScaling).
TRUNCATED_STD = 0.87962566103423978


def _bns(model: keras.Model) -> list[keras.layers.BatchNormalization]:
    return [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]


def _convs(model: keras.Model) -> list[keras.layers.Conv2D]:
    return [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]


def _tiny_resnet(**kwargs) -> keras.Model:
    return resnet18(num_classes=3, input_shape=(32, 32, 3), **kwargs)


def _tiny_inception(**kwargs) -> keras.Model:
    return inception_v3(num_classes=3, input_shape=(75, 75, 3), **kwargs)


@agnostic
def test_resnet_batchnorm_defaults_are_keras_applications():
    bns = _bns(_tiny_resnet())
    assert len(bns) == 20  # ResNet-18: conv1 + 8 blocks x 2 + 3 shortcuts
    for bn in bns:
        assert (bn.momentum, bn.epsilon, bn.scale) == (0.9, 1.001e-5, True)
        assert [v.name for v in bn.trainable_weights] == ["gamma", "beta"]


@agnostic
def test_resnet_batchnorm_knobs_reach_every_batch_norm():
    bns = _bns(_tiny_resnet(bn_momentum=0.8, bn_epsilon=1e-4, bn_scale=False))
    assert len(bns) == 20
    for bn in bns:
        assert (bn.momentum, bn.epsilon, bn.scale) == (0.8, 1e-4, False)
        assert [v.name for v in bn.trainable_weights] == ["beta"]


@agnostic
def test_inception_batchnorm_defaults_and_nvcnn_values():
    # nvcnn_hvd.py v1.1 GPUNetworkBuilder: batch_norm_config decay 0.9, epsilon 1e-4, scale True.
    default, nvcnn = (
        _tiny_inception(),
        _tiny_inception(bn_momentum=0.9, bn_epsilon=1e-4, bn_scale=True),
    )
    assert len(_bns(default)) == len(_bns(nvcnn)) == 94
    assert {(b.momentum, b.epsilon, b.scale) for b in _bns(default)} == {(0.99, 1e-3, False)}
    assert {(b.momentum, b.epsilon, b.scale) for b in _bns(nvcnn)} == {(0.9, 1e-4, True)}


def test_inception_gamma_adds_one_weight_per_batch_norm_channel():
    # keras.applications InceptionV3: 23,851,784 weights, 23,817,352 trainable; the rest are
    # moving mean + variance, 2 per batch-norm channel: (23,851,784 - 23,817,352) / 2 = 17,216
    # channels, so gamma adds 17,216 trainable weights.
    model = inception_v3(bn_scale=True)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    assert trainable == 23_817_352 + 17_216


@agnostic
def test_default_initializers_are_fan_out_normal_and_fc_normal_001():
    model = _tiny_resnet()
    for conv in _convs(model):
        init = conv.kernel_initializer
        assert type(init) is keras.initializers.VarianceScaling
        assert (init.scale, init.mode, init.distribution) == (2.0, "fan_out", "untruncated_normal")
    fc = model.get_layer("predictions").kernel_initializer
    assert type(fc) is keras.initializers.RandomNormal
    assert (fc.mean, fc.stddev) == (0.0, 0.01)


@agnostic
@pytest.mark.parametrize("build", [_tiny_resnet, _tiny_inception])
def test_fan_in_truncated_reaches_every_conv_and_the_classifier(build):
    model = build(conv_initializer="fan_in_truncated", dense_initializer="fan_in_truncated")
    layers = [*_convs(model), model.get_layer("predictions")]
    for layer in layers:
        init = layer.kernel_initializer
        assert type(init) is keras.initializers.VarianceScaling
        assert (init.scale, init.mode, init.distribution) == (2.0, "fan_in", "truncated_normal")


@agnostic
def test_fan_in_truncated_values_stay_within_two_stddev():
    # conv1: 7x7x3 -> fan_in 147; stddev sqrt(2 / 147) / 0.8796 = 0.13260; bound 2 x that.
    fan_in = 7 * 7 * 3
    bound = 2.0 * math.sqrt(2.0 / fan_in) / TRUNCATED_STD
    truncated = _tiny_resnet(conv_initializer="fan_in_truncated")
    w = keras.ops.convert_to_numpy(truncated.get_layer("conv1_conv").kernel)
    assert np.abs(w).max() <= bound
    assert np.abs(w).max() > 0.95 * bound  # 9,408 draws fill the range up to the cut
    # The default (fan_out, untruncated: stddev sqrt(2 / (7 * 7 * 64)) = 0.02525) has about
    # 4.6% of its 9,408 values beyond its own 2 stddev: the cut is what the knob adds.
    std_out = math.sqrt(2.0 / (7 * 7 * 64))
    w0 = keras.ops.convert_to_numpy(_tiny_resnet().get_layer("conv1_conv").kernel)
    assert (np.abs(w0) > 2 * std_out).mean() > 0.02


@agnostic
def test_glorot_uniform_as_nvcnn():
    # nvcnn_hvd.py v1.1 `_get_variable`: glorot_uniform for conv and FC kernels.
    model = _tiny_inception(conv_initializer="glorot_uniform", dense_initializer="glorot_uniform")
    for layer in [*_convs(model), model.get_layer("predictions")]:
        assert type(layer.kernel_initializer) is keras.initializers.GlorotUniform


@agnostic
def test_inception_last_block_pooling():
    default = _tiny_inception()
    assert type(default.get_layer("mixed9_pool")) is keras.layers.AveragePooling2D
    assert type(default.get_layer("mixed10_pool")) is keras.layers.AveragePooling2D
    nvcnn = _tiny_inception(last_block_pooling="max")
    assert type(nvcnn.get_layer("mixed9_pool")) is keras.layers.AveragePooling2D
    pool = nvcnn.get_layer("mixed10_pool")
    assert type(pool) is keras.layers.MaxPooling2D
    # nvcnn's ('pool', 'MAX', (3,3), (1,1), 'SAME'): 3x3, stride 1, same.
    assert (pool.pool_size, pool.strides, pool.padding) == ((3, 3), (1, 1), "same")


def test_initializer_aliases_and_keras_names():
    init = common.initializer("normal_0.01")
    assert type(init) is keras.initializers.RandomNormal and init.stddev == 0.01
    assert type(common.initializer("he_uniform")) is keras.initializers.HeUniform
    given = keras.initializers.Constant(0.5)
    assert common.initializer(given) is given
    # Each alias call is a new object (layers do not share one seeded initializer).
    assert common.initializer("fan_out") is not common.initializer("fan_out")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bn_momentum": 1.0}, "bn_momentum must be a number in \\[0, 1\\); got 1.0"),
        ({"bn_momentum": True}, "bn_momentum must be a number in \\[0, 1\\); got True"),
        ({"bn_epsilon": 0.0}, "bn_epsilon must be a positive number; got 0.0"),
        ({"bn_scale": 1}, "bn_scale must be True or False; got 1"),
        ({"conv_initializer": "fan_sideways"}, "unknown initializer 'fan_sideways'"),
        ({"dense_initializer": "nope"}, "unknown initializer 'nope'"),
    ],
)
def test_bad_knobs_raise_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _tiny_resnet(**kwargs)
    with pytest.raises(ValueError, match=message):
        _tiny_inception(**kwargs)


def test_bad_last_block_pooling_raises():
    with pytest.raises(ValueError, match="last_block_pooling must be one of .*got 'avg'"):
        _tiny_inception(last_block_pooling="avg")
