"""Keras train and forward steps without a host sync per step.

`Model.train_on_batch` is convenient but slow in a loop: every call converts the logs to
NumPy (a host sync that drains the device queue), resets the metrics and, on JAX, gathers
the model's state into a tuple before the step and writes every variable back after it
(Keras' own `fit` notes that doing this per step "would be a big performance bottleneck").
`TrainStepRunner` runs the same compiled step (`model.train_function`, XLA-compiled when
the model was compiled with `jit_compile`) the way `fit` does: on JAX the state stays in a
tuple between steps and is written back by `sync()`; the logs stay on the device until the
caller reads them.

`make_forward` is the inference counterpart: a compiled forward pass (`jax.jit` of
`Model.stateless_call`, or `tf.function`), without `predict_on_batch`'s per-call NumPy
conversion.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import keras


def _variable_groups(model: keras.Model) -> list[list[keras.Variable]]:
    """The variable lists of Keras' JAX train-step state, in its order."""
    return [
        list(model.trainable_variables),
        list(model.non_trainable_variables),
        list(model.optimizer.variables),
        list(model.metrics_variables),
    ]


class TrainStepRunner:
    """Runs a compiled model's training step, leaving results on the device.

    Use it after one `model.train_on_batch(...)` call (which builds the model, its metrics
    and the optimizer, and compiles the step), then `step(...)` as often as needed and
    `sync()` before anything else reads or writes the model's variables: on JAX they are
    stale (their buffers donated to the step) until then. The runner is also a context
    manager that syncs on exit.

    Example:
        >>> import numpy as np
        >>> inputs = keras.Input((3,))
        >>> model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.ones((4, 3), "float32"), np.zeros((4, 1), "float32")
        >>> _ = model.train_on_batch(x, y)  # builds and compiles
        >>> with TrainStepRunner(model) as runner:
        ...     for _ in range(3):
        ...         logs = runner.step(x, y)
        >>> int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        4

    Args:
        model: a compiled `keras.Model` whose optimizer is built.

    Raises:
        ValueError: if the model is not compiled or its optimizer not built.
    """

    def __init__(self, model: keras.Model) -> None:
        if not getattr(model, "compiled", False) or model.optimizer is None:
            raise ValueError(f"model {model.name!r} must be compiled with an optimizer first")
        if not model.optimizer.built:
            raise ValueError(
                f"the optimizer of model {model.name!r} is not built: run one "
                "model.train_on_batch(...) (or optimizer.build(...)) first"
            )
        self.model = model
        self._jax = keras.config.backend() == "jax"
        self._state: tuple | None = None

    def step(self, x: Any, y: Any = None, sample_weight: Any = None) -> dict[str, Any]:
        """Runs one training step on a batch; returns its logs as device tensors."""
        model = self.model
        model.make_train_function()
        data = iter([(x, y, sample_weight)])
        if not self._jax:
            return model.train_function(data)
        if self._state is None:
            self._state = tuple([v.value for v in group] for group in _variable_groups(model))
        logs, self._state = model.train_function(self._state, data)
        return logs

    def sync(self) -> None:
        """Writes the state held between steps back to the model's variables (JAX only)."""
        if self._state is None:
            return
        for group, values in zip(_variable_groups(self.model), self._state, strict=True):
            for variable, value in zip(group, values, strict=True):
                variable.assign(value)
        self._state = None

    def __enter__(self) -> TrainStepRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sync()


def resolve_jit_compile(jit_compile: bool | str, *, ranks: int = 1) -> bool:
    """Whether to XLA-compile steps: `jit_compile` itself, or for "auto" Keras' own choice
    (JAX: always; TensorFlow: only with a GPU, XLA being slower on CPU) except under Horovod
    (`ranks > 1`), whose operations have no XLA kernels.

    Raises:
        ValueError: for a value other than True, False or "auto".
    """
    if jit_compile not in (True, False, "auto"):
        raise ValueError(f"jit_compile must be True, False or 'auto', got {jit_compile!r}")
    if jit_compile != "auto":
        return bool(jit_compile)
    if ranks > 1:
        return False
    backend = keras.config.backend()
    if backend == "jax":
        return True
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_logical_devices("GPU"))
    return False


def make_forward(model: keras.Model, *, jit_compile: bool = True) -> Callable[[Any], Any]:
    """A compiled inference forward pass `x -> outputs` (device tensors, `training=False`).

    On JAX the weights are those of the model when this is called (a snapshot passed to a
    `jax.jit` of `stateless_call`); on TensorFlow a `tf.function` (XLA with `jit_compile`)
    reads the live variables; other backends call the model directly. The compiled function
    is shared by every forward pass of the same model (and `jit_compile`), so a batch shape
    compiled once is not compiled again.

    Example:
        >>> import numpy as np
        >>> inputs = keras.Input((2,))
        >>> model = keras.Model(inputs, keras.layers.Dense(1, kernel_initializer="ones")(inputs))
        >>> forward = make_forward(model)
        >>> keras.ops.convert_to_numpy(forward(np.ones((1, 2), "float32"))).tolist()
        [[2.0]]
    """
    backend = keras.config.backend()
    if backend not in ("jax", "tensorflow"):
        return lambda x: model(x, training=False)
    key = (backend, bool(jit_compile))
    compiled = _COMPILED.setdefault(model, {})
    if key not in compiled:
        compiled[key] = _compile_forward(model, backend, bool(jit_compile))
    fn = compiled[key]
    # Each returned function holds the model: the cache holds it only weakly.
    if backend == "jax":
        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        return lambda x, _model=model: fn(trainable, non_trainable, x)
    return lambda x, _model=model: fn(x)


_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _compile_forward(model: keras.Model, backend: str, jit_compile: bool) -> Callable:
    # A weak reference: the cache entry must not keep its own key (the model) alive.
    ref = weakref.ref(model)
    if backend == "jax":
        import jax

        def forward(trainable, non_trainable, x):
            return ref().stateless_call(trainable, non_trainable, x, training=False)[0]

        return jax.jit(forward)
    import tensorflow as tf

    return tf.function(lambda x: ref()(x, training=False), jit_compile=jit_compile)
