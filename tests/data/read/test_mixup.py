"""Mixup (`cvbench.data.read.mixup`): DLE's per-image Beta weights and reversed-batch partners."""

import doctest
import importlib
import math

import numpy as np
import pytest
import tensorflow as tf

from cvbench.data.read.mixup import mix_batch, mixup, sample_mixup_weights


def batches(images, labels, repeat=1):
    return tf.data.Dataset.from_tensors((images, labels)).repeat(repeat)


def own_weights(dataset):
    """Each image's own weight: with labels 0..B-1 (B even, so no image is its own partner),
    the soft label of image i holds w_i at column i."""
    return np.concatenate([np.diag(labels.numpy()) for _, labels in dataset])


def test_mix_batch_exact():
    # Four 1x1x2 images; image i is (i, 10 i). Partners: 0<->3, 1<->2 (the batch reversed).
    images = tf.constant([[[[i, 10.0 * i]]] for i in range(4)], tf.float32)
    labels = tf.constant([0, 1, 2, 1])
    weights = tf.constant([0.75, 0.5, 0.2, 1.0])
    mixed, soft = mix_batch(images, labels, weights, num_classes=3)
    # image 0: 0.75 x 0 + 0.25 x 3 = 0.75; image 1: 0.5 x 1 + 0.5 x 2 = 1.5;
    # image 2: 0.2 x 2 + 0.8 x 1 = 1.2; image 3: 1.0 x 3 + 0 x 0 = 3 (second channel x 10).
    np.testing.assert_allclose(
        mixed.numpy().reshape(4, 2), [[0.75, 7.5], [1.5, 15.0], [1.2, 12.0], [3.0, 30.0]]
    )
    # labels 0,1,2,1; partners' labels 1,2,1,0.
    expected = [
        [0.75, 0.25, 0.0],  # 0.75 x class 0 + 0.25 x class 1
        [0.0, 0.5, 0.5],  # 0.5 x class 1 + 0.5 x class 2
        [0.0, 0.8, 0.2],  # 0.2 x class 2 + 0.8 x class 1
        [0.0, 1.0, 0.0],  # 1.0 x class 1
    ]
    np.testing.assert_allclose(soft.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(soft.numpy().sum(axis=1), 1.0, rtol=1e-6)


def test_mix_batch_takes_soft_labels_and_keeps_the_image_dtype():
    images = tf.cast(tf.reshape(tf.range(4, dtype=tf.float32), [2, 1, 1, 2]), tf.bfloat16)
    soft = tf.constant([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    mixed, labels = mix_batch(images, soft, tf.constant([0.5, 0.25]), num_classes=3)
    assert mixed.dtype == tf.bfloat16
    # (0, 1) and (2, 3): 0.5/0.5 -> (1, 2); 0.25 x (2, 3) + 0.75 x (0, 1) = (0.5, 1.5).
    np.testing.assert_allclose(
        tf.cast(mixed, tf.float32).numpy().reshape(2, 2), [[1, 2], [0.5, 1.5]]
    )
    np.testing.assert_allclose(labels.numpy(), [[0.25, 0.25, 0.5], [0.375, 0.375, 0.25]])
    with pytest.raises(ValueError, match=r"num_classes=4 columns, got shape \[2, 3\]"):
        mix_batch(images, soft, tf.constant([0.5, 0.25]), num_classes=4)


def test_smoothing_the_mixed_labels_is_dles_mix_of_smoothed_labels():
    # DLE (model/resnet.py l.152-177) smooths first, then mixes; the loss here smooths the
    # mixed labels: (1 - s) (w a + (1 - w) b) + s / K = w ((1 - s) a + s / K) + (1 - w) (...).
    s, k = 0.1, 5
    labels = tf.constant([4, 0, 2, 2])
    weights = tf.constant([0.9, 0.3, 0.6, 0.05])
    _, soft = mix_batch(tf.zeros([4, 1, 1, 1]), labels, weights, num_classes=k)
    ours = (1 - s) * soft.numpy() + s / k
    smoothed = np.full((4, k), s / k)
    smoothed[np.arange(4), labels.numpy()] += 1 - s
    w = weights.numpy()[:, None]
    dle = w * smoothed + (1 - w) * smoothed[::-1]
    np.testing.assert_allclose(ours, dle, rtol=1e-6)


@pytest.mark.parametrize("alpha", [0.2, 2.0])
def test_weights_follow_beta_alpha_alpha(alpha):
    # E[w^k] of Beta(a, a) is prod_{r<k} (a + r) / (2a + r): 1/2 for k = 1; for a = 0.2 and
    # k = 2, 0.2 / 0.4 x 1.2 / 1.4 = 0.4286; variance 1 / (4 (2a + 1)) = 0.1786 (a uniform
    # weight has 1/12 = 0.0833, a single weight per batch would not change these moments
    # but the next test sees it).
    # 20,000 draws from a fixed seed: the standard error of each moment is below 0.0036.
    w = sample_mixup_weights(tf.constant([7, 11]), 20000, alpha=alpha).numpy().astype("float64")
    assert w.min() >= 0.0 and w.max() <= 1.0
    for k in range(1, 5):
        expected = math.prod((alpha + r) / (2 * alpha + r) for r in range(k))
        assert np.mean(w**k) == pytest.approx(expected, abs=0.01), k
    assert np.var(w) == pytest.approx(1 / (4 * (2 * alpha + 1)), abs=0.01)
    assert np.mean(w < 0.5) == pytest.approx(0.5, abs=0.02)  # symmetric


def test_one_weight_per_image_not_per_batch():
    images = tf.zeros([8, 2, 2, 3])
    w = own_weights(mixup(batches(images, tf.range(8)), alpha=0.2, num_classes=8, seed=0))
    assert len(np.unique(np.round(w, 6))) == 8


def test_seeded_weights_are_deterministic_per_rank_and_new_each_epoch():
    data = batches(tf.zeros([16, 1, 1, 1]), tf.range(16), repeat=3)
    first = mixup(data, alpha=0.2, num_classes=16, seed=5)
    epoch_1, epoch_2 = own_weights(first), own_weights(first)
    again = own_weights(mixup(data, alpha=0.2, num_classes=16, seed=5))
    np.testing.assert_array_equal(epoch_1, again)  # same seed, same weights
    assert not np.allclose(epoch_1, epoch_2)  # a new epoch draws new ones
    rank_1 = own_weights(mixup(data, alpha=0.2, num_classes=16, seed=5, shard_index=1))
    assert not np.allclose(epoch_1, rank_1)
    other_seed = own_weights(mixup(data, alpha=0.2, num_classes=16, seed=6))
    assert not np.allclose(epoch_1, other_seed)


def test_dataset_labels_sum_to_one_and_images_are_the_mixes():
    images = tf.random.stateless_normal([6, 4, 4, 3], seed=[3, 4])
    labels = tf.constant([0, 1, 2, 3, 4, 5])
    weights_in = tf.ones([6])  # a third element (sample weights) passes through
    data = tf.data.Dataset.from_tensors((images, labels, weights_in))
    (x, y, sw) = next(iter(mixup(data, alpha=0.4, num_classes=6, seed=1)))
    np.testing.assert_allclose(y.numpy().sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(sw.numpy(), np.ones(6))
    w = np.diag(y.numpy())[:, None, None, None]
    expected = w * images.numpy() + (1 - w) * images.numpy()[::-1]
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_alpha_zero_is_off():
    data = batches(tf.zeros([2, 1, 1, 1]), tf.constant([0, 1]))
    assert mixup(data, alpha=0, num_classes=2, seed=0) is data


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.2", True])
def test_bad_alpha_names_the_value(bad):
    data = batches(tf.zeros([2, 1, 1, 1]), tf.constant([0, 1]))
    with pytest.raises(ValueError, match=f"mixup alpha must be .*got {bad!r}"):
        mixup(data, alpha=bad, num_classes=2, seed=0)


def test_bad_num_classes_and_zero_alpha_sampling():
    data = batches(tf.zeros([2, 1, 1, 1]), tf.constant([0, 1]))
    with pytest.raises(ValueError, match="num_classes must be a positive int, got 0"):
        mixup(data, alpha=0.2, num_classes=0, seed=0)
    with pytest.raises(ValueError, match="needs alpha > 0, got 0"):
        sample_mixup_weights(tf.constant([0, 0]), 4, alpha=0.0)


def test_docstring_examples():
    # The module, whatever `cvbench.data.read.mixup` names (the package may export the function).
    module = importlib.import_module("cvbench.data.read.mixup")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
