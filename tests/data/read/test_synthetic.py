"""Synthetic batches: the NumPy path (any Keras backend) and the tf.data wrapper."""

from __future__ import annotations

import numpy as np
import pytest

from cvbench.data.read.synthetic import synthetic_arrays, synthetic_batches


@pytest.mark.backend_agnostic
def test_synthetic_arrays_are_a_fixed_random_batch():
    images, labels = synthetic_arrays(4, 16, 10, seed=3)
    assert images.shape == (4, 16, 16, 3) and images.dtype == np.float32
    assert labels.shape == (4,) and labels.dtype == np.int32
    assert labels.min() >= 0 and labels.max() < 10
    again, again_labels = synthetic_arrays(4, 16, 10, seed=3)
    np.testing.assert_array_equal(images, again)
    np.testing.assert_array_equal(labels, again_labels)
    assert not np.array_equal(images, synthetic_arrays(4, 16, 10, seed=4)[0])
    # Standard normal values, like normalized pixels: mean ~0, std ~1 over 4*16*16*3 = 3072.
    assert abs(float(images.mean())) < 0.1 and abs(float(images.std()) - 1) < 0.1
    assert synthetic_arrays(2, 8, dtype="bfloat16")[0].dtype.name == "bfloat16"


@pytest.mark.backend_agnostic
def test_synthetic_batches_repeat_the_same_batch():
    batches = list(synthetic_batches(2, 8, 5, steps=3))
    assert len(batches) == 3
    assert all(b[0] is batches[0][0] for b in batches)
    endless = synthetic_batches(2, 8, 5)
    assert all(next(endless)[0].shape == (2, 8, 8, 3) for _ in range(10))


@pytest.mark.backend_agnostic
def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        synthetic_arrays(0)
    with pytest.raises(ValueError, match="floating"):
        synthetic_arrays(2, 8, dtype="int32")
    with pytest.raises(ValueError, match="steps"):
        next(synthetic_batches(2, 8, steps=-1))


@pytest.mark.backend_agnostic
def test_keras_fits_on_synthetic_batches():
    import keras

    model = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(5)]
    )
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    history = model.fit(synthetic_batches(4, 8, 5), steps_per_epoch=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_synthetic_dataset_is_the_same_batch_as_a_tf_dataset():
    import tensorflow as tf

    from cvbench.data import synthetic_dataset

    ds = synthetic_dataset(4, 16, 10, seed=3, dtype="bfloat16")
    images, labels = synthetic_arrays(4, 16, 10, seed=3)
    for x, y in ds.take(2):
        assert x.dtype == tf.bfloat16 and x.shape == (4, 16, 16, 3)
        np.testing.assert_array_equal(y.numpy(), labels)
        np.testing.assert_allclose(tf.cast(x, tf.float32).numpy(), images, rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="floating"):
        synthetic_dataset(2, 8, dtype="int32")
