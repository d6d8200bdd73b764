"""Tiny Keras inputs shared by the benchmark tests (package and suite)."""

from __future__ import annotations

import keras
import numpy as np


def tiny_classifier() -> keras.Model:
    """8x8x3 images -> 5 softmax classes (one conv, pooling, one dense), compiled with SGD."""
    inputs = keras.Input((8, 8, 3))
    h = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(h))
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


def tiny_batch(n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """`n` N(0, 1) images 8x8x3 float32 and labels in [0, 5) int32 (seed 0)."""
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 8, 8, 3)).astype("float32"), rng.integers(0, 5, n).astype("int32")
