"""The compiled model the Trainer drives: the user's model, a whole-structure loss, and a
train step that is applied whole or not at all.

Keras' compiled loss maps a single loss function over every output of a multi-output
model. Detection losses need the whole structures at once (`loss(y_true, y_pred)` with dicts
of targets and predictions), so the Trainer wraps the user's model in `TrainingModel`, whose
`compute_loss` calls the loss once on the full structures.

The train step is Keras' own (gradient tape on TensorFlow, `jax.value_and_grad` on JAX, loss
scaling, metrics) with one change, *whole-step semantics*: a step whose loss or gradients are
not finite changes no variable at all. Keras' `LossScaleOptimizer` skips the update (and halves
the scale) on non-finite gradients, but the forward pass has by then written the batch's
statistics into the batch-norm moving means and variances: a forward overflow (an activation
beyond float16's 65,504) left them NaN for good. Here:

- the step counts as *applied* when the optimizer's `iterations` advanced (under
  `LossScaleOptimizer`: the inner optimizer's, which advances only on finite gradients);
  without loss scaling the update itself runs only when the gradients are finite;
- the gradients it decides on are the ones averaged over Horovod ranks (the average is non-
  finite on every rank when it is on any), and a non-finite loss turns one (the smallest)
  gradient into NaN first, so every rank makes the same decision;
- on a skipped step the non-trainable variables (moving statistics, seed states) and the
  metric states are put back to their values from before the step; trainable variables and
  optimizer state were never touched (except the loss scale and its counter, which
  `LossScaleOptimizer` updates on purpose);
- the step's logs carry `skipped` (1.0 or 0.0) next to the step's own loss and metrics.

Cost, measured with `KERAS_BACKEND=tensorflow python benchmarks/whole_step_overhead.py`
(ResNet-18, 32 x 32 images, batch 8, float32, a 2-core CPU shared with other work): Keras'
step 53.0 / 56.6 ms, this one 54.7 / 59.9 ms in two runs, i.e. +1.7 to +3.3 ms (3-6 %),
nearly all of it the finite check of the gradients; JAX: 125.2 -> 127.5 ms (+1.8 %). Under
mixed_float16 that check is `LossScaleOptimizer`'s own and this step adds no second one.

The wrapper shares the user's variables; the user's model itself is never compiled or changed.
Callbacks see the wrapper (so `model.optimizer` and `model.stop_training` work); its `save`,
`save_weights`, `load_weights` and `export` act on the user's model.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import keras
from keras import ops

from cvbench.training import distributed


class TrainingModel(keras.Model):
    """Wraps `model` with a loss computed on whole structures, and whole-step training.

    Example:
        >>> import numpy as np
        >>> inputs = keras.Input((2,))
        >>> inner = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        >>> model = TrainingModel(
        ...     inner, keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        ... )
        >>> model.compile(optimizer="sgd")
        >>> x, y = np.ones((4, 2), "float32"), np.zeros((4,), "int32")
        >>> model.train_on_batch(x, y, return_dict=True)["skipped"]
        0.0
        >>> before = [v.numpy().copy() for v in model.variables]
        >>> model.train_on_batch(np.full((4, 2), np.nan, "float32"), y, return_dict=True)[
        ...     "skipped"
        ... ]
        1.0
        >>> all((a == v.numpy()).all() for a, v in zip(before, model.variables))
        True

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

    # ------------------------------------------------------------------ the train step
    def train_step(self, *args):
        """Keras' train step with whole-step semantics (see the module docstring).

        TensorFlow: `train_step(data) -> logs`; JAX: `train_step(state, data) -> (logs,
        state)`; other backends: Keras' own step.
        """
        if not self.trainable_variables:
            return super().train_step(*args)
        backend = keras.config.backend()
        if backend == "tensorflow":
            return self._tf_train_step(*args)
        if backend == "jax":
            return self._jax_train_step(*args)
        return super().train_step(*args)

    def _tf_train_step(self, data):
        import tensorflow as tf

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        kept = list(self.non_trainable_variables) + list(self.metrics_variables)
        before = [tf.identity(v.value) for v in kept]  # values, not the variables
        variables = list(self.trainable_variables)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            self._loss_tracker.update_state(loss, sample_weight=tf.shape(_first(x))[0])
            scaled = self.optimizer.scale_loss(loss)
        grads = _poison_if_not_finite(tape.gradient(scaled, variables), loss)
        optimizer = self.optimizer
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            start = tf.identity(optimizer.iterations.value)
            optimizer.apply(grads, variables)
            applied = ops.greater(tf.identity(optimizer.iterations.value), start)
        else:
            reduce, apply = distributed.split_gradient_reduction(optimizer)
            grads = reduce(grads)
            applied = _all_finite(grads)
            ops.cond(applied, lambda: apply(grads, variables), lambda: None)
        logs = self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

        def restore() -> None:
            for variable, value in zip(kept, before, strict=True):
                variable.assign(value)

        ops.cond(applied, lambda: None, restore)
        return dict(logs, skipped=ops.cast(ops.logical_not(applied), "float32"))

    def _jax_train_step(self, state, data):
        import jax

        trainable, non_trainable, optimizer_state, metrics_state = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
        (_, aux), grads = grad_fn(
            trainable,
            non_trainable,
            metrics_state,
            x,
            y,
            sample_weight,
            training=True,
            optimizer_variables=optimizer_state,
        )
        loss, y_pred, new_non_trainable, new_metrics = aux
        grads = _poison_if_not_finite(grads, loss)
        optimizer = self.optimizer
        trainable, optimizer_state = list(trainable), list(optimizer_state)
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            new_trainable, new_optimizer = optimizer.stateless_apply(
                optimizer_state, grads, trainable
            )
            index = next(i for i, v in enumerate(optimizer.variables) if v is optimizer.iterations)
            applied = ops.greater(new_optimizer[index], optimizer_state[index])
        else:
            applied = _all_finite(grads)
            new_trainable, new_optimizer = ops.cond(
                applied,
                lambda: _lists(optimizer.stateless_apply(optimizer_state, grads, trainable)),
                lambda: (trainable, optimizer_state),
            )
        logs, new_metrics = self._update_metrics_variables(
            new_metrics, loss, x, y, y_pred, sample_weight
        )
        state = (
            new_trainable,
            _unless(applied, non_trainable, new_non_trainable),
            new_optimizer,
            _unless(applied, metrics_state, new_metrics),
        )
        return dict(logs, skipped=ops.cast(ops.logical_not(applied), "float32")), state

    # ------------------------------------------------------------------ the user's model
    def save(self, *args, **kwargs):
        return self.inner.save(*args, **kwargs)

    def save_weights(self, *args, **kwargs):
        return self.inner.save_weights(*args, **kwargs)

    def load_weights(self, *args, **kwargs):
        return self.inner.load_weights(*args, **kwargs)

    def export(self, *args, **kwargs):
        return self.inner.export(*args, **kwargs)


def _first(x):
    return next(t for t in keras.tree.flatten(x) if t is not None)


def _all_finite(grads) -> object:
    """A scalar bool tensor: every element of every gradient is finite (the check
    `LossScaleOptimizer` makes; on a CPU it measured cheaper than one finite check of the
    sum of all gradients)."""
    checks = [ops.all(ops.isfinite(g)) for g in grads if g is not None]
    return ops.all(ops.stack(checks)) if checks else ops.convert_to_tensor(True)


def _poison_if_not_finite(grads, loss) -> list:
    """`grads` with the smallest dense gradient made NaN when `loss` is not finite, so that a
    non-finite loss on any rank makes the averaged gradients non-finite on every rank."""
    grads = list(grads)
    dense = [i for i, g in enumerate(grads) if g is not None and not hasattr(g, "indices")]
    if not dense:
        return grads
    i = min(dense, key=lambda j: math.prod(d or 1 for d in grads[j].shape))
    nan = ops.cast(float("nan"), grads[i].dtype)
    grads[i] = ops.where(ops.isfinite(loss), grads[i], nan)
    return grads


def _lists(pair) -> tuple[list, list]:
    return list(pair[0]), list(pair[1])


def _unless(applied, before: list, after: list) -> list:
    """`after` where the step was applied, else `before` (element by element)."""
    return [ops.where(applied, new, old) for old, new in zip(before, after, strict=True)]
