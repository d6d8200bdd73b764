"""Mixup for classification training batches, as NVIDIA DeepLearningExamples does it.

The reference is TensorFlow/Classification/ConvNets `model/resnet.py` l.154-177 (at
729963dd), used by the 250-epoch ResNet-50 v1.5 recipe (`--mixup=0.2`,
`resnet50v1.5/training/DGX1_RN50_AMP_250E.sh`):

* one weight per *image*, `lambda_i ~ Beta(alpha, alpha)` (l.157-159: a sample of shape
  `[batch_size, 1, 1, 1]`), not one per batch;
* the partner of image `i` is image `B - 1 - i`: the batch reversed (l.165, l.171), not a
  random permutation; each image keeps its own weight, so images `i` and `B - 1 - i` are
  mixed with independent weights;
* `image_i <- lambda_i image_i + (1 - lambda_i) image_{B-1-i}`, and the same with the
  one-hot labels (l.167, l.177).

DLE mixes after normalizing the images and smoothing the labels; both are affine maps whose
weights sum to one, so mixing first gives the same result: here the raw (normalized)
batch is mixed in the input pipeline and the loss smooths the mixed labels
(`cvbench.training.losses.SparseCrossEntropy` accepts the `[batch, C]` soft labels).

Randomness is stateless: `lambda` comes from two `tf.random.stateless_gamma` draws
(`Beta(a, a) = X / (X + Y)` for `X, Y ~ Gamma(a)`, the construction of TF1's
`tf.distributions.Beta` that DLE calls) with a seed per batch from the dataset's seed stream
(`seed`, made per rank and kept apart from the augmentation's stream), so a seed gives the
same weights on every run.

`alpha = 0` means no mixup (DLE: `if mixup != 0`): the dataset is returned as it is, with its
integer labels.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

# Mixed into the seed, so the weights' stream is not the augmentation's (`imagenet_dataset`
# derives its per-example seeds from the same user seed and rank).
_STREAM = 0x6D69787570  # "mixup"


def _check_alpha(alpha: float) -> float:
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float))
        or not math.isfinite(alpha)
        or alpha < 0
    ):
        raise ValueError(f"mixup alpha must be a finite number >= 0, got {alpha!r}")
    return float(alpha)


def _check_classes(num_classes: int) -> int:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
    return num_classes


def sample_mixup_weights(seed: tf.Tensor, batch_size: int, *, alpha: float) -> tf.Tensor:
    """One mixup weight per image, `Beta(alpha, alpha)`, from a stateless seed.

    Args:
        seed: int32/int64 [2], a stateless random seed.
        batch_size: number of weights.
        alpha: the Beta parameter, > 0.

    Returns:
        float32 [batch_size] in [0, 1] (computed in float64; 0.5 where both gamma draws
        underflow to 0, which float64 makes practically impossible).

    Raises:
        ValueError: for alpha not > 0.
    """
    alpha = _check_alpha(alpha)
    if alpha == 0:
        raise ValueError("sample_mixup_weights needs alpha > 0, got 0")
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=2)
    shape = tf.reshape(tf.cast(batch_size, tf.int32), [1])
    x = tf.random.stateless_gamma(shape, seeds[0], alpha=alpha, dtype=tf.float64)
    y = tf.random.stateless_gamma(shape, seeds[1], alpha=alpha, dtype=tf.float64)
    total = x + y
    weights = tf.where(total > 0, x / tf.where(total > 0, total, 1.0), 0.5)
    return tf.cast(weights, tf.float32)


def mix_batch(
    images: tf.Tensor, labels: tf.Tensor, weights: tf.Tensor, *, num_classes: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """Mixes each image and label with those of the reversed batch (DLE's partner rule).

    `images_i <- w_i images_i + (1 - w_i) images_{B-1-i}`, the same for the one-hot labels.

    Example:
        >>> images = tf.constant([[[[0.0]]], [[[10.0]]]])  # two 1x1x1 images
        >>> mixed, soft = mix_batch(images, tf.constant([0, 1]), tf.constant([0.75, 0.5]),
        ...                         num_classes=2)
        >>> mixed.numpy().ravel().tolist(), soft.numpy().tolist()
        ([2.5, 5.0], [[0.75, 0.25], [0.5, 0.5]])

    Args:
        images: [B, ...] float images (any float dtype; mixed in float32, returned in theirs).
        labels: [B] integer classes in [0, num_classes), or [B, num_classes] soft labels.
        weights: float [B], the weight of each image's own content.
        num_classes: C.

    Returns:
        `(images [B, ...] in the images' dtype, labels float32 [B, C])`; each label row sums
        to 1 when the input rows did.

    Raises:
        ValueError: for soft labels of another width than `num_classes`, or a bad
            `num_classes`.
    """
    num_classes = _check_classes(num_classes)
    labels = tf.convert_to_tensor(labels)
    if labels.shape.rank == 2:
        if labels.shape[-1] != num_classes:
            raise ValueError(
                f"soft labels must have num_classes={num_classes} columns, got shape "
                f"{labels.shape.as_list()}"
            )
        soft = tf.cast(labels, tf.float32)
    else:
        soft = tf.one_hot(tf.reshape(tf.cast(labels, tf.int32), [-1]), num_classes)
    images = tf.convert_to_tensor(images)
    w = tf.cast(tf.reshape(weights, [-1]), tf.float32)
    pixels = tf.cast(images, tf.float32)
    w_images = tf.reshape(w, tf.concat([[-1], tf.ones([tf.rank(pixels) - 1], tf.int32)], 0))
    mixed = w_images * pixels + (1.0 - w_images) * tf.reverse(pixels, axis=[0])
    w_labels = w[:, None]
    soft = w_labels * soft + (1.0 - w_labels) * tf.reverse(soft, axis=[0])
    return tf.cast(mixed, images.dtype), soft


def mixup(
    dataset: tf.data.Dataset,
    *,
    alpha: float,
    num_classes: int,
    seed: int | None,
    shard_index: int = 0,
) -> tf.data.Dataset:
    """Applies DLE's mixup to every batch of a classification training dataset.

    Example:
        >>> images = tf.random.stateless_normal([4, 8, 8, 3], seed=[1, 2])
        >>> batches = tf.data.Dataset.from_tensors((images, tf.constant([0, 1, 2, 3])))
        >>> mixed = mixup(batches, alpha=0.2, num_classes=5, seed=0)
        >>> x, y = next(iter(mixed))
        >>> x.shape.as_list(), y.shape.as_list()
        ([4, 8, 8, 3], [4, 5])

    Args:
        dataset: batches `(images [B, H, W, 3], labels [B] int)`, or with a third element
            (sample weights) that is passed on unchanged.
        alpha: the Beta parameter; 0 returns `dataset` itself (no mixup, integer labels).
        num_classes: C, the width of the soft labels.
        seed: makes the weights deterministic (with `shard_index`, different per rank, as
            `imagenet_dataset` makes its augmentation); None: nondeterministic.
        shard_index: this process's rank (Horovod's rank under horovodrun).

    Returns:
        The dataset of `(images, labels float32 [B, C])` (plus the third element), each
        label row summing to 1; re-iterating it (an epoch of a finite dataset) draws new
        weights, the same ones for the same seed.

    Raises:
        ValueError: for a negative or non-finite alpha, or a bad num_classes.
    """
    alpha = _check_alpha(alpha)
    num_classes = _check_classes(num_classes)
    if alpha == 0:
        return dataset
    if seed is not None:
        seed = int(np.random.SeedSequence([seed, shard_index, _STREAM]).generate_state(1)[0])
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)

    def mix(element, pair):
        images, labels, *rest = element
        weights = sample_mixup_weights(pair, tf.shape(images)[0], alpha=alpha)
        return (*mix_batch(images, labels, weights, num_classes=num_classes), *rest)

    return tf.data.Dataset.zip((dataset, seeds)).map(
        mix, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
