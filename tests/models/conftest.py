"""Helpers for the model tests: gradients on any backend, legacy keras.applications files.

Nothing here imports TensorFlow unless the TensorFlow backend is the one in use.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest


def _linear_loss(outputs, weights: list[np.ndarray]):
    """sum_k mean(outputs_k * weights_k): every output element gets a non-zero gradient.

    A fixed random linear functional, unlike a mean of softmax outputs (which sums to a
    constant per row, so its gradient is zero).
    """
    flat = keras.tree.flatten(outputs)
    return sum(
        keras.ops.mean(keras.ops.cast(o, "float32") * w) for o, w in zip(flat, weights, strict=True)
    )


def _gradients(model: keras.Model, x: np.ndarray, weights: list[np.ndarray]):
    """Returns (loss, [gradient per trainable variable]) in training mode, as numpy arrays."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = _linear_loss(model(x, training=True), weights)
        grads = tape.gradient(loss, model.trainable_variables)
    elif backend == "jax":
        import jax

        non_trainable = [v.value for v in model.non_trainable_variables]

        def loss_fn(trainable):
            outputs, _ = model.stateless_call(trainable, non_trainable, x, training=True)
            return _linear_loss(outputs, weights)

        # One compiled function: op-by-op JAX compiles every new shape (twice as slow on CPU).
        grad_fn = jax.jit(jax.value_and_grad(loss_fn))
        loss, grads = grad_fn([v.value for v in model.trainable_variables])
    else:
        raise ValueError(f"no gradient helper for backend {backend!r}")
    to_np = keras.ops.convert_to_numpy
    return to_np(loss), [None if g is None else to_np(g) for g in grads]


@pytest.fixture(scope="session")
def gradients():
    """`gradients(model, x, weights)`: (loss, per-variable gradients) of `linear_loss`."""
    return _gradients
