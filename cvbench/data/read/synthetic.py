"""Synthetic data for throughput benchmarks: one fixed random batch, repeated forever.

`synthetic_arrays` and `synthetic_batches` use NumPy only (any Keras backend, no TensorFlow);
`synthetic_dataset` wraps the same batch in a `tf.data.Dataset` (imports TensorFlow when
called). The images look like normalized pixels (standard normal values), the labels are
uniform over the classes; both depend only on the seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def _check(batch_size: int, image_size: int, num_classes: int) -> None:
    for name, value in (
        ("batch_size", batch_size),
        ("image_size", image_size),
        ("num_classes", num_classes),
    ):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def synthetic_arrays(
    batch_size: int,
    image_size: int = 224,
    num_classes: int = 1000,
    *,
    seed: int = 0,
    dtype: Any = "float32",
) -> tuple[np.ndarray, np.ndarray]:
    """One random batch as NumPy arrays.

    Args:
        batch_size: images in the batch.
        image_size: height and width.
        num_classes: labels are drawn from 0..num_classes-1.
        seed: the random seed (same seed, same arrays).
        dtype: image dtype, a NumPy dtype name ('float32', 'float16'; 'bfloat16' needs
            ml_dtypes, which JAX and TensorFlow install).

    Returns:
        `(images [batch_size, image_size, image_size, 3] dtype, labels [batch_size] int32)`.
    """
    _check(batch_size, image_size, num_classes)
    if dtype == "bfloat16":
        import ml_dtypes

        np_dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"dtype must be a NumPy floating dtype name, got {dtype!r}") from None
        if not np.issubdtype(np_dtype, np.floating):
            raise ValueError(f"dtype must be a floating dtype, got {dtype!r}")
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch_size, image_size, image_size, 3), dtype=np.float32)
    labels = rng.integers(0, num_classes, size=batch_size, dtype=np.int32)
    return images.astype(np_dtype), labels


def synthetic_batches(
    batch_size: int,
    image_size: int = 224,
    num_classes: int = 1000,
    *,
    seed: int = 0,
    dtype: Any = "float32",
    steps: int | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yields the `synthetic_arrays` batch `steps` times (forever when None).

    A plain Python iterator: `model.fit(synthetic_batches(...), steps_per_epoch=...)` works on
    every Keras backend.
    """
    if steps is not None and steps < 0:
        raise ValueError(f"steps must be >= 0 or None, got {steps}")
    batch = synthetic_arrays(batch_size, image_size, num_classes, seed=seed, dtype=dtype)
    count = 0
    while steps is None or count < steps:
        yield batch
        count += 1


def synthetic_dataset(
    batch_size: int,
    image_size: int = 224,
    num_classes: int = 1000,
    *,
    seed: int = 0,
    dtype: Any = "float32",
) -> Any:
    """The `synthetic_arrays` batch as an endless `tf.data.Dataset` of `(images, labels)`.

    The batch is a constant held in memory, so the pipeline costs nothing: what a benchmark
    on it measures is the model.
    """
    import tensorflow as tf

    try:
        tf_dtype = tf.as_dtype(dtype)
    except TypeError:
        tf_dtype = None
    if tf_dtype is None or not tf_dtype.is_floating:
        raise ValueError(f"dtype must be a floating dtype name, got {dtype!r}")
    images, labels = synthetic_arrays(batch_size, image_size, num_classes, seed=seed)
    tf_images = tf.cast(tf.constant(images), tf_dtype)
    ds = tf.data.Dataset.from_tensors((tf_images, tf.constant(labels))).repeat()
    return ds.prefetch(1)
