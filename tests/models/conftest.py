"""Helpers for the model tests: gradients on any backend, legacy keras.applications files.

Nothing here imports TensorFlow unless the TensorFlow backend is the one in use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
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


def _randomize(model: keras.Model, seed: int) -> None:
    """Gives every variable a random value, so no weight is trivially 0 or 1 (conv biases
    and batch-norm statistics would otherwise hide a wrong mapping)."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        shape = tuple(v.shape)
        if v.name in ("gamma", "moving_variance"):
            value = rng.uniform(0.5, 1.5, shape)
        elif v.name in ("beta", "moving_mean", "bias"):
            value = rng.normal(0.0, 0.1, shape)
        else:  # kernels: He-uniform scale keeps activations of order one through the net
            fan_in = int(np.prod(shape[:-1]))
            value = rng.uniform(-1.0, 1.0, shape) * np.sqrt(6.0 / fan_in)
        v.assign(value.astype("float32"))


def _write_legacy_h5(model: keras.Model, path: Path) -> None:
    """Writes `model`'s weights as keras.applications' downloads are laid out (Keras 2).

    Root attributes `layer_names` (every layer, in model order), `backend`, `keras_version`;
    one group per layer with attribute `weight_names` (`layer/var:0`, trainable first) naming
    datasets below it (the `/` makes a subgroup, as h5py and Keras 2 did).
    """
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [layer.name.encode("utf8") for layer in model.layers]
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.2.4"
        for layer in model.layers:
            group = f.create_group(layer.name)
            variables = layer.trainable_weights + layer.non_trainable_weights
            names = [f"{layer.name}/{v.name}:0" for v in variables]
            group.attrs["weight_names"] = [n.encode("utf8") for n in names]
            for name, v in zip(names, variables, strict=True):
                group.create_dataset(name, data=keras.ops.convert_to_numpy(v))


@pytest.fixture(scope="session")
def legacy_h5() -> Callable[[keras.Model, Path, int | None], Path]:
    """`legacy_h5(model, path, seed)`: randomises `model`'s weights (unless `seed` is None) and
    writes them to `path` in the keras.applications legacy HDF5 layout; returns `path`."""

    def make(model: keras.Model, path: Path, seed: int | None = 0) -> Path:
        if seed is not None:
            _randomize(model, seed)
        _write_legacy_h5(model, path)
        return path

    return make
