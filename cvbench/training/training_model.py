"""The compiled model the Trainer drives: the user's model plus a whole-structure loss.

Keras' compiled loss maps a single loss function over every output of a multi-output
model. Detection losses need the whole structures at once (`loss(y_true, y_pred)` with dicts
of targets and predictions), so the Trainer wraps the user's model in `TrainingModel`, whose
`compute_loss` calls the loss once on the full structures. Keras' own train/test steps do the
rest on every backend (gradient tape or `jax.grad`, loss scaling, metrics).

The wrapper shares the user's variables; the user's model itself is never compiled or changed.
Callbacks see the wrapper (so `model.optimizer` and `model.stop_training` work); its `save`,
`save_weights`, `load_weights` and `export` act on the user's model.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
from keras import ops


class TrainingModel(keras.Model):
    """Wraps `model` with a loss computed on whole structures.

    Args:
        model: the model being trained (its variables are shared, not copied).
        loss: `loss(y_true, y_pred) -> scalar`. A `keras.losses.Loss` also receives
            `sample_weight` when the batch has one.
    """

    def __init__(self, model: keras.Model, loss: Callable) -> None:
        super().__init__(name=f"{model.name}_training")
        if not callable(loss):
            raise ValueError(f"loss must be callable as loss(y_true, y_pred), got {loss!r}")
        self.inner = model
        self.loss_fn = loss

    def call(self, inputs, training=None):
        return self.inner(inputs, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del x, training
        if sample_weight is not None and isinstance(self.loss_fn, keras.losses.Loss):
            loss = self.loss_fn(y, y_pred, sample_weight=sample_weight)
        else:
            loss = self.loss_fn(y, y_pred)
        loss = ops.cast(loss, "float32")
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), "float32")
        return loss

    def save(self, *args, **kwargs):
        return self.inner.save(*args, **kwargs)

    def save_weights(self, *args, **kwargs):
        return self.inner.save_weights(*args, **kwargs)

    def load_weights(self, *args, **kwargs):
        return self.inner.load_weights(*args, **kwargs)

    def export(self, *args, **kwargs):
        return self.inner.export(*args, **kwargs)
