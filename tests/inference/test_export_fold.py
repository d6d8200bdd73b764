"""Batch-norm folding (`cvbench.inference.fold_batchnorm`): same outputs, fewer layers."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import layers

from cvbench.detection.ssd import build_ssd
from cvbench.inference.fold_batchnorm import count_batchnorms, fold_batchnorm, folded_weights
from cvbench.models import resnet18
from cvbench.models.layers import FastConv2D
from cvbench.utils.model_layers import all_layers


def randomize_batchnorms(model: keras.Model, seed: int) -> None:
    """Moving statistics, gamma and beta far from (0, 1, 1, 0), so a wrong fold shows."""
    rng = np.random.default_rng(seed)
    for layer in all_layers(model):
        if isinstance(layer, layers.BatchNormalization):
            n = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.normal(0.0, 0.5, n).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, n).astype("float32"))
            layer.gamma.assign(rng.uniform(0.5, 1.5, n).astype("float32"))
            layer.beta.assign(rng.normal(0.0, 0.5, n).astype("float32"))


def test_fold_weights_by_hand():
    # 1x1 conv, kernel 2, no bias; BN gamma 3, beta 1, mean 0.5, variance 0.249, eps 1e-3:
    # s = 3 / sqrt(0.25) = 6, kernel' = 2 * 6 = 12, bias' = (0 - 0.5) * 6 + 1 = -2.
    # x = 1: bn(conv(x)) = 3 * (2 - 0.5) / 0.5 + 1 = 10 = 12 * 1 - 2.
    inputs = keras.Input((1, 1, 1))
    conv = FastConv2D(1, 1, use_bias=False, name="c")
    bn = layers.BatchNormalization(epsilon=1e-3, name="bn")
    model = keras.Model(inputs, bn(conv(inputs)))
    conv.kernel.assign(np.full((1, 1, 1, 1), 2.0, "float32"))
    bn.set_weights([np.array([3.0]), np.array([1.0]), np.array([0.5]), np.array([0.249])])
    kernel, bias = folded_weights(conv, bn)
    np.testing.assert_allclose(kernel.ravel(), [12.0], rtol=1e-6)
    np.testing.assert_allclose(bias, [-2.0], rtol=1e-6)
    folded = fold_batchnorm(model)
    assert count_batchnorms(folded) == 0
    assert type(folded.get_layer("c")) is layers.Conv2D  # the training-only subclass is gone
    np.testing.assert_allclose(np.asarray(folded(np.ones((1, 1, 1, 1)))).ravel(), [10.0], 1e-6)


def test_resnet18_folds_every_batchnorm_with_equal_outputs():
    model = resnet18(input_shape=(32, 32, 3), num_classes=5, classifier_activation=None)
    randomize_batchnorms(model, 0)
    folded = fold_batchnorm(model)
    assert count_batchnorms(model) == 20 and count_batchnorms(folded) == 0
    x = np.random.default_rng(1).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    expected = np.asarray(model(x, training=False))
    assert np.abs(expected).max() > 1.0  # the check below is not on near-zero outputs
    np.testing.assert_allclose(np.asarray(folded(x)), expected, rtol=1e-4, atol=1e-4)
    # The original is untouched: its batch norms still run.
    assert count_batchnorms(model) == 20


def test_ssd_folds_its_backbone_and_keeps_the_composites():
    model = build_ssd(num_classes=3, backbone="resnet18", image_size=64, depth=16, head_layers=2)
    randomize_batchnorms(model, 2)
    folded = fold_batchnorm(model)
    # 20 in the backbone (folded); the FeaturePyramid (2 smoothing + 2 extra) and the head
    # (2 towers x 2 layers x 5 levels) call theirs inside their own call: 4 + 20 = 24 kept.
    assert count_batchnorms(model) == 44 and count_batchnorms(folded) == 24
    x = np.random.default_rng(3).uniform(0, 255, (2, 64, 64, 3)).astype("float32")
    expected = model(x, training=False)
    got = folded(x)
    assert set(got) == {"boxes", "classes"}
    for key in expected:
        np.testing.assert_allclose(np.asarray(got[key]), np.asarray(expected[key]), 1e-4, 1e-4)
    # Its plain copy (what export folds) has the composites as functional graphs: all 44 fold,
    # the head's shared convolutions getting one folded copy per level.
    from cvbench.utils.plain_keras import to_plain_keras

    plain_folded = fold_batchnorm(to_plain_keras(model))
    assert count_batchnorms(plain_folded) == 0
    got = plain_folded(x)
    for key in expected:
        np.testing.assert_allclose(np.asarray(got[key]), np.asarray(expected[key]), 1e-4, 1e-4)


def test_a_shared_convolution_gets_one_folded_copy_per_batchnorm():
    # The SSD head's layout in functional form: one conv over two levels, one BN per level.
    a, b = keras.Input((4, 4, 2)), keras.Input((2, 2, 2))
    conv = layers.Conv2D(3, 3, padding="same", use_bias=True, name="tower")
    bn_a, bn_b = layers.BatchNormalization(name="bn_a"), layers.BatchNormalization(name="bn_b")
    model = keras.Model([a, b], [bn_a(conv(a)), bn_b(conv(b))])
    randomize_batchnorms(model, 4)
    folded = fold_batchnorm(model)
    assert count_batchnorms(folded) == 0
    assert {layer.name for layer in folded.layers} >= {"tower_bn_a", "tower_bn_b"}
    rng = np.random.default_rng(5)
    xs = [rng.normal(size=(2, 4, 4, 2)), rng.normal(size=(2, 2, 2, 2))]
    for got, expected in zip(folded(xs), model(xs, training=False), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), 1e-5, 1e-5)


def test_unfoldable_pairs_are_kept():
    # A conv read by two layers, and a conv with an activation: folding either would change
    # what the other reader (or the activation) sees.
    x = keras.Input((4, 4, 2))
    shared = layers.Conv2D(2, 1, name="shared")(x)
    relu_conv = layers.Conv2D(2, 1, activation="relu", name="relu_conv")(x)
    out = layers.Add()(
        [layers.BatchNormalization()(shared), shared, layers.BatchNormalization()(relu_conv)]
    )
    model = keras.Model(x, out)
    randomize_batchnorms(model, 6)
    folded = fold_batchnorm(model)
    assert count_batchnorms(folded) == 2
    data = np.random.default_rng(7).normal(size=(2, 4, 4, 2))
    np.testing.assert_allclose(
        np.asarray(folded(data)), np.asarray(model(data, training=False)), 1e-6, 1e-6
    )


def test_rejects_a_subclassed_model():
    class Net(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ValueError, match="functional model; got Net"):
        fold_batchnorm(Net())
