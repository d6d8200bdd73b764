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

from cvbench.utils.model_file import MAX_INPUT_SIDE, byte_count

#: The largest image side of a synthetic batch: the bound of a model file's input side and of
#: a run's `--image-size` (`cvbench.tasks.recipes.resolve.MAX_IMAGE_SIZE`), 8192.
MAX_SYNTHETIC_SIDE = MAX_INPUT_SIDE
#: The largest synthetic batch, in bytes of its float32 images (what is drawn, before any
#: cast): 16 GiB, far over a real batch (256 ResNet-50 images at 224 are 147 MiB), and what a
#: typo of a size asks for (hundreds of GiB) is refused before anything is allocated.
MAX_SYNTHETIC_BYTES = 16 << 30
#: The most classes: the labels are int32.
MAX_SYNTHETIC_CLASSES = 2**31 - 1


def _check(batch_size: int, image_size: int, num_classes: int) -> None:
    """Refuses, naming the value, a size that is no positive int, an image side over
    `MAX_SYNTHETIC_SIDE`, more classes than int32 labels hold, and a batch whose float32
    images would be over `MAX_SYNTHETIC_BYTES`."""
    for name, value, most in (
        ("batch_size", batch_size, None),
        ("image_size", image_size, MAX_SYNTHETIC_SIDE),
        ("num_classes", num_classes, MAX_SYNTHETIC_CLASSES),
    ):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
        if most is not None and value > most:
            raise ValueError(f"{name} {value} is over {most}, the largest of a synthetic batch")
    size = int(batch_size) * int(image_size) ** 2 * 3 * 4
    if size > MAX_SYNTHETIC_BYTES:
        raise ValueError(
            f"batch_size {batch_size} of {image_size}x{image_size} images needs "
            f"{byte_count(size)} of float32, over {byte_count(MAX_SYNTHETIC_BYTES)}, the "
            "largest synthetic batch: pass a smaller batch_size or image_size"
        )


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

    Raises:
        ValueError: naming the value: a size or seed that is no int (sizes >= 1, the seed
            >= 0), an `image_size` over `MAX_SYNTHETIC_SIDE` (8192), a batch whose float32
            images are over `MAX_SYNTHETIC_BYTES` (16 GiB), or a dtype that is not floating.
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
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch_size, image_size, image_size, 3), dtype=np.float32)
    labels = rng.integers(0, num_classes, size=batch_size, dtype=np.int32)
    return images.astype(np_dtype, copy=False), labels


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
    bad_steps = not isinstance(steps, int | np.integer) or isinstance(steps, bool) or steps < 0
    if steps is not None and bad_steps:
        raise ValueError(f"steps must be an int >= 0 or None, got {steps!r}")
    # drawn (and checked) at the call, not at the first batch the generator yields
    batch = synthetic_arrays(batch_size, image_size, num_classes, seed=seed, dtype=dtype)
    return _repeated(batch, steps)


def _repeated(batch: Any, steps: int | None) -> Iterator[Any]:
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
