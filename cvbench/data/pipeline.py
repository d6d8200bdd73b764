"""The common second half of the classification input pipelines (TFRecord and TFDS sources).

Both take a dataset of *examples*, dicts with:

* `encoded`: scalar string, the encoded image;
* `label`: int32, 0-based class;
* `boxes`: float32 [num_boxes, 4] normalized `[ymin, xmin, ymax, xmax]` (may be empty);
* `filename`, `source`: strings naming the image and the file it came from;
* `index`: int64, the record's position in `source`.

`train_pipeline` yields `(images, labels)` batches; `eval_pipeline` yields
`(images, labels, weights)` batches where padding rows have weight 0 (see its docstring).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from cvbench.data.corrupt import CorruptRecordCounter, apply_policy, guarded_map, plain
from cvbench.data.preprocessing import preprocess_for_eval, preprocess_for_train

TrainPreprocess = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tf.Tensor]
EvalPreprocess = Callable[[tf.Tensor], tf.Tensor]


def check_args(batch_size: int, image_size: int, dtype: Any) -> tf.DType:
    """Validates the shared arguments; returns `dtype` as a floating `tf.DType`."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"image_size must be a positive int, got {image_size!r}")
    try:
        tf_dtype = tf.as_dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be a floating dtype name, got {dtype!r}") from None
    if not tf_dtype.is_floating:
        raise ValueError(f"dtype must be a floating dtype (float32, bfloat16, ...), got {dtype!r}")
    return tf_dtype


def _undecodable(out: Any, ok: tf.Tensor, e: dict) -> tf.Tensor:
    return tf.strings.join(
        [
            "undecodable image ",
            e["filename"],
            " (record ",
            tf.strings.as_string(e["index"]),
            " of ",
            e["source"],
            ")",
        ]
    )


def _decode_checked(
    ds: tf.data.Dataset,
    fn: Callable[[dict], tf.Tensor],
    output_spec: tf.TensorSpec,
    *,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    deterministic: bool | None,
) -> tf.data.Dataset:
    """`fn` over examples; corrupt ones raise or are skipped. Yields (image, example)."""
    guarded = guarded_map(ds, fn, output_spec=output_spec, deterministic=deterministic)
    checked = apply_policy(
        guarded,
        lambda t: t[1],
        lambda t: _undecodable(*t),
        skip_corrupt=skip_corrupt,
        counter=counter,
    )
    return checked.map(plain(lambda image, ok, e: (image, e)))


def _options(deterministic: bool) -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = deterministic
    return options


def train_pipeline(
    examples: tf.data.Dataset,
    *,
    batch_size: int,
    image_size: int,
    dtype: tf.DType,
    seed: int | None,
    shuffle_buffer: int,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    preprocess: TrainPreprocess | None = None,
) -> tf.data.Dataset:
    """Shuffle, augment, batch (dropping the remainder), prefetch.

    Args:
        examples: example dicts (repeat them before calling for an endless stream).
        batch_size: images per batch.
        image_size: output height and width.
        dtype: image dtype.
        seed: makes shuffling and augmentation deterministic; None: nondeterministic.
        shuffle_buffer: examples in the shuffle buffer (1 disables shuffling).
        skip_corrupt: skip and count undecodable images instead of raising.
        counter: counts skipped images.
        preprocess: `(image_bytes, boxes, seed[2]) -> image` to use instead of
            `preprocess_for_train(image_size=image_size, dtype=dtype)`.

    Returns:
        `(images [batch, image_size, image_size, 3] dtype, labels [batch] int32)` batches.
    """
    if preprocess is None:
        preprocess = functools.partial(preprocess_for_train, image_size=image_size, dtype=dtype)
    if shuffle_buffer > 1:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    seeds = tf.data.Dataset.random(seed=seed).batch(2)
    ds = tf.data.Dataset.zip((examples, seeds)).map(plain(lambda e, s: {**e, "seed": s}))
    ds = _decode_checked(
        ds,
        lambda e: preprocess(e["encoded"], e["boxes"], e["seed"]),
        tf.TensorSpec([image_size, image_size, 3], dtype),
        skip_corrupt=skip_corrupt,
        counter=counter,
        deterministic=seed is not None,
    )
    ds = ds.map(plain(lambda image, e: (image, e["label"])))
    ds = ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return ds.with_options(_options(seed is not None))


def eval_steps(max_records_per_rank: int, batch_size: int) -> int:
    """Batches every rank yields: ceil(max records of any rank / batch_size)."""
    return -(-max_records_per_rank // batch_size)


def eval_pipeline(
    examples: tf.data.Dataset,
    *,
    batch_size: int,
    image_size: int,
    dtype: tf.DType,
    steps: int,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    preprocess: EvalPreprocess | None = None,
) -> tf.data.Dataset:
    """Decode, resize, central crop, then pad to exactly `steps` full batches.

    Every example of `examples` appears once, in order, with weight 1.0; padding rows (zero
    image, label 0, weight 0.0) fill the last batch and any further batches up to `steps`, so
    that every rank runs the same number of steps (collective ops in step) with static
    shapes. Count correct predictions with the weights (Keras metrics take them as
    `sample_weight`; `model.evaluate` uses the third element as sample weights).

    Args:
        examples: example dicts, one pass, at most `steps * batch_size` of them.
        batch_size: images per batch.
        image_size: output height and width.
        dtype: image dtype.
        steps: batches to yield (`eval_steps` of the largest rank's record count).
        skip_corrupt: skip and count undecodable images instead of raising.
        counter: counts skipped images.
        preprocess: `image_bytes -> image` to use instead of `preprocess_for_eval`.

    Returns:
        `(images [batch, image_size, image_size, 3] dtype, labels [batch] int32,
        weights [batch] float32)` batches; exactly `steps` of them (its cardinality).
    """
    if preprocess is None:
        preprocess = functools.partial(preprocess_for_eval, image_size=image_size, dtype=dtype)
    ds = _decode_checked(
        examples,
        lambda e: preprocess(e["encoded"]),
        tf.TensorSpec([image_size, image_size, 3], dtype),
        skip_corrupt=skip_corrupt,
        counter=counter,
        deterministic=True,
    )
    ds = ds.map(plain(lambda image, e: (image, e["label"], tf.constant(1.0))))
    pad = tf.data.Dataset.from_tensors(
        (
            tf.zeros([image_size, image_size, 3], dtype),
            tf.constant(0, tf.int32),
            tf.constant(0.0),
        )
    ).repeat()
    ds = ds.concatenate(pad).take(steps * batch_size)
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.apply(tf.data.experimental.assert_cardinality(steps)).prefetch(tf.data.AUTOTUNE)
    return ds.with_options(_options(True))
