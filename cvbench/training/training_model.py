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

- the step counts as *applied* when its gradients, averaged over Horovod ranks, are all
  finite (the average is non-finite on every rank when it is on any), and a non-finite loss
  turns one (the smallest) gradient into NaN first, so every rank makes the same decision;
- only an applied step runs the optimizer's update (under `LossScaleOptimizer`: unscale,
  inner update, count towards the next scale growth); a skipped step halves a dynamic loss
  scale and puts the non-trainable variables (moving statistics, seed states) and the metric
  states back to their values from before the step; trainable variables and optimizer state
  are never touched by it;
- the step's logs carry `skipped` (1.0 or 0.0) next to the step's own loss and metrics.

On TensorFlow the step is two graphs (`make_train_function`): one computes the loss, the
averaged gradients, their finite check and the metrics; the other applies the update, and is
called only when the first says the gradients are finite. The choice is made in Python, not
with `tf.cond`, because TensorFlow does not run an optimizer update under a conditional
reproducibly: with the update inside `ops.cond(finite, apply, noop)` (as in Keras' own
`LossScaleOptimizer.apply`), two `--deterministic` runs of the same command drift apart within
a few steps, and the same step repeated in one process from the same variables, with
bit-identical gradients, gives different variables (the L2 weight-decay read of each weight is
part of it: without weight decay, or without the conditional, every repeat is identical).
`tests/reliability/test_deterministic_runs.py` keeps two runs bit-identical. On JAX the step is
one stateless function, the update selected with `where`.

The cost is the finite check, the second graph call and the host read of its result: a fixed
few milliseconds a step, not a cost per image (`benchmarks/whole_step_overhead.py` measures it
against Keras' own step on either backend).

The wrapper shares the user's variables; the user's model itself is never compiled or changed.
Callbacks see the wrapper (so `model.optimizer` and `model.stop_training` work); its `save`,
`save_weights`, `load_weights` and `export` act on the user's model.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator

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
        """The loss of a batch. Evaluating, with a `sample_weight` (0 for padding rows) and a
        per-example `keras.losses.Loss` (reduction "sum_over_batch_size" / "mean"), it is
        the weighted mean over the real rows, `sum(w * l) / sum(w)` (0 when `sum(w) = 0`), so
        that padding neither adds to it nor dilutes it (`test_step` weighs it by `sum(w)`)."""
        del x
        if sample_weight is not None and isinstance(self.loss_fn, keras.losses.Loss):
            if not training and self.loss_fn.reduction in PER_EXAMPLE_REDUCTIONS:
                loss = _weighted_mean(self.loss_fn.call(y, y_pred), sample_weight)
            else:
                loss = self.loss_fn(y, y_pred, sample_weight=sample_weight)
        else:
            loss = self.loss_fn(y, y_pred)
        loss = ops.cast(loss, "float32")
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), "float32")
        return loss

    # ------------------------------------------------------------------ the test step
    def test_step(self, *args):
        """Keras' test step, with the loss tracker weighing each batch by its real rows
        (`sum(sample_weight)`, the batch size without weights) instead of the batch's rows:
        the evaluation loss over a padded last batch is the mean over real examples only.

        JAX: `test_step(state, data) -> (logs, state)`; TensorFlow: `test_step(data)`.
        """
        backend = keras.config.backend()
        if backend == "jax":
            return self._jax_test_step(*args)
        if backend != "tensorflow":
            return super().test_step(*args)
        (data,) = args
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred = self(x, training=False)
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                 training=False)  # fmt: skip
        self._loss_tracker.update_state(loss, sample_weight=_real_rows(x, sample_weight))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def _jax_test_step(self, state, data):
        trainable, non_trainable, metrics_state = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        _, aux = self.compute_loss_and_updates(
            trainable, non_trainable, metrics_state, x, y, sample_weight, training=False
        )
        loss, y_pred, non_trainable, metrics_state = aux
        mapping = list(zip(self.metrics_variables, metrics_state, strict=True))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            self._loss_tracker.update_state(loss, sample_weight=_real_rows(x, sample_weight))
            logs = self.compute_metrics(x, y, y_pred, sample_weight)
        new_metrics = []
        for variable, old in mapping:
            value = scope.get_current_value(variable)
            new_metrics.append(old if value is None else value)
        return logs, (trainable, non_trainable, new_metrics)

    # ------------------------------------------------------------------ the train step
    def train_step(self, *args):
        """Keras' train step with whole-step semantics (see the module docstring).

        JAX: `train_step(state, data) -> (logs, state)`; TensorFlow steps go through
        `make_train_function` (two graphs, see `_tf_step`); other backends: Keras' own step.
        """
        if not self.trainable_variables:
            return super().train_step(*args)
        backend = keras.config.backend()
        if backend == "tensorflow":
            raise NotImplementedError(
                "on TensorFlow TrainingModel trains through make_train_function "
                "(train_on_batch, fit), whose step is not one graph"
            )
        if backend == "jax":
            return self._jax_train_step(*args)
        return super().train_step(*args)

    def make_train_function(self, force: bool = False):
        """On TensorFlow, the whole-step train function (see `_tf_step`); elsewhere Keras'."""
        if keras.config.backend() != "tensorflow" or not self.trainable_variables:
            return super().make_train_function(force)
        if self.train_function is not None and not force:
            return self.train_function
        import tensorflow as tf

        # The variables a skipped step puts back, as they are when the graph is traced (metric
        # variables made during the first trace start at zero and are reset each step anyway).
        kept: list = []

        def gradients_step(data):
            kept[:] = list(self.non_trainable_variables) + list(self.metrics_variables)
            return self._tf_gradients(data, kept)

        gradients = tf.function(gradients_step, reduce_retracing=True, jit_compile=self.jit_compile)
        apply = tf.function(self._tf_apply, jit_compile=self.jit_compile)

        def train_function(iterator):
            # Keras' contract: one step per call from its `fit` iterator (a tf.data or
            # distributed iterator), up to `steps_per_execution` from `train_on_batch`'s.
            if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
                return self._tf_step(gradients, apply, kept, next(iterator))
            logs = None
            for _, data in zip(range(self.steps_per_execution), iterator, strict=False):
                logs = self._tf_step(gradients, apply, kept, data)
            return logs

        self.train_function = train_function
        return train_function

    def _tf_step(self, gradients, apply, kept: list, data) -> dict:
        """One whole step on TensorFlow, in two graphs: `gradients` (forward, loss, gradients
        averaged over ranks, their finite check, metrics) then, only when they are finite,
        `apply` (the optimizer's update). The decision between them is made here, in Python,
        so no graph has a variable update inside a conditional: TensorFlow does not run an
        optimizer update under `tf.cond` reproducibly (see the module docstring)."""
        with released_gradient_functions():
            grads, applied, logs, before = gradients(data)
        applied = bool(applied)
        if applied:
            with released_gradient_functions():
                apply(grads)
        else:
            for variable, value in zip(kept, before, strict=True):
                variable.assign(value)
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
                self.optimizer._stateful_handle_non_finite_grads()  # halves a dynamic scale
        return dict(logs, skipped=0.0 if applied else 1.0)

    def _tf_gradients(self, data, kept: list):
        import tensorflow as tf

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
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
        reduce, _ = distributed.split_gradient_reduction(self.optimizer)
        grads = reduce(grads)
        logs = self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        return grads, _all_finite(grads), logs, before

    def _tf_apply(self, grads) -> None:
        """The update of a step whose (averaged) gradients are finite."""
        variables = list(self.trainable_variables)
        optimizer = self.optimizer
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            # Unscales, applies the inner optimizer, counts towards the next scale growth.
            optimizer._stateful_handle_finite_grads(grads, variables)
        else:
            _, apply = distributed.split_gradient_reduction(optimizer)
            apply(grads, variables)

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


# Reductions of a `keras.losses.Loss` whose value is a mean of per-example losses.
PER_EXAMPLE_REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")


def _weighted_mean(values, sample_weight) -> object:
    """`sum(w * l) / sum(w)` in float32 over the batch axis (`values` averaged over any
    other axes first); 0 when every weight is 0."""
    values = ops.cast(values, "float32")
    if len(values.shape) > 1:
        values = ops.mean(ops.reshape(values, (values.shape[0], -1)), axis=1)
    weights = ops.reshape(ops.cast(sample_weight, "float32"), (-1,))
    total = ops.sum(values * weights)
    count = ops.sum(weights)
    return ops.where(count > 0, total / ops.maximum(count, 1e-12), 0.0)


def _real_rows(x, sample_weight) -> object:
    """The batch's real examples: `sum(sample_weight)`, or its rows without weights."""
    if sample_weight is None:
        return ops.cast(ops.shape(_first(x))[0], "float32")
    return ops.sum(ops.cast(sample_weight, "float32"))


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


@contextlib.contextmanager
def released_gradient_functions() -> Iterator[None]:
    """Drops the gradient functions `tf.custom_gradient` registered while the block traced
    a graph (`FastConv2D`'s convolutions, TensorFlow's own all-reduce of the gradients).

    In graph mode each call registers its gradient function in TensorFlow's global gradient
    registry, for good, and the function holds the traced graph and, through its captures,
    the model's variables: every `Trainer` kept its model's weights alive after it was gone
    (a notebook training model after model, the demo's two stages, the suite's tests). The
    functions are needed only while the graph that called them is traced (to build its
    gradient); the block's trace is done at its end. A block that traced nothing registered
    nothing: the check is the registry's length (a dict keeps its insertion order).

    Example:
        >>> with released_gradient_functions():
        ...     pass
    """
    registry = _gradient_registry()
    size = len(registry) if registry is not None else 0
    try:
        yield
    finally:
        if registry is not None and len(registry) > size:
            for key in list(registry)[size:]:
                if key.startswith("CustomGradient-"):
                    del registry[key]


def _gradient_registry() -> dict | None:
    """TensorFlow's gradient functions by op type, where TensorFlow is loaded (a private
    table: None where a TensorFlow version has it elsewhere, and nothing is released)."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    table = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    return table if isinstance(table, dict) else None
