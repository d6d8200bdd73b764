"""TrainStepRunner trains exactly as train_on_batch does; make_forward is the model's call."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.benchmark.steps import TrainStepRunner, make_forward, resolve_jit_compile
from cvbench.training.precision import backend_has_gpu

pytestmark = pytest.mark.backend_agnostic


def _model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,))
    h = keras.layers.Dense(4)(inputs)
    h = keras.layers.BatchNormalization()(h)  # non-trainable state too
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.ReLU()(h)))
    model.compile(
        optimizer=keras.optimizers.SGD(0.1, momentum=0.9),  # optimizer state too
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _batches():
    rng = np.random.default_rng(0)
    return [
        (rng.normal(size=(8, 5)).astype("float32"), rng.integers(0, 3, 8).astype("int32"))
        for _ in range(4)
    ]


def test_runner_steps_equal_train_on_batch_steps():
    batches = _batches()
    reference, model = _model(1), _model(1)
    for x, y in batches:
        reference.train_on_batch(x, y)
    model.train_on_batch(*batches[0])
    with TrainStepRunner(model) as runner:
        for x, y in batches[1:]:
            logs = runner.step(x, y)
    assert set(logs) >= {"loss"}
    for a, b in zip(reference.variables, model.variables, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6
        )
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 4
    # The model is usable again after the sync: one more ordinary step works.
    model.train_on_batch(*batches[0])
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 5


def test_runner_needs_a_compiled_model_with_a_built_optimizer():
    inputs = keras.Input((2,))
    bare = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    with pytest.raises(ValueError, match="must be compiled"):
        TrainStepRunner(bare)
    bare.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="not built"):
        TrainStepRunner(bare)


def test_sync_twice_is_harmless_and_logs_stay_tensors():
    model = _model(2)
    x, y = _batches()[0]
    model.train_on_batch(x, y)
    runner = TrainStepRunner(model)
    logs = runner.step(x, y)
    assert not isinstance(logs["loss"], float)  # still a device tensor: no host sync
    runner.sync()
    runner.sync()
    assert np.isfinite(keras.ops.convert_to_numpy(model.trainable_variables[0])).all()


def test_forward_matches_the_model_in_inference_mode():
    model = _model(3)
    x = _batches()[0][0]
    forward = make_forward(model, jit_compile=resolve_jit_compile("auto"))
    expected = keras.ops.convert_to_numpy(model(x, training=False))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(forward(x)), expected, rtol=1e-5)


def test_resolve_jit_compile():
    assert resolve_jit_compile(True) is True and resolve_jit_compile(False) is False
    assert resolve_jit_compile("auto", ranks=2) is False  # Horovod ops have no XLA kernels
    # TensorFlow: XLA only with a GPU (slower than TF's kernels on CPU); JAX always compiles.
    backend = keras.config.backend()
    expected = backend == "jax" or (backend == "tensorflow" and backend_has_gpu())
    assert resolve_jit_compile("auto") is expected
    with pytest.raises(ValueError, match="jit_compile"):
        resolve_jit_compile("yes")


def test_forward_is_compiled_once_per_model_and_released_with_it():
    import gc
    import weakref

    from cvbench.benchmark import steps

    model = _model(4)
    x = _batches()[0][0]
    first, second = make_forward(model), make_forward(model)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(first(x)), keras.ops.convert_to_numpy(second(x)), rtol=1e-6
    )
    assert len(steps._COMPILED[model]) == 1  # one compiled function for both
    ref = weakref.ref(model)
    del model, first, second
    gc.collect()
    assert ref() is None  # the cache does not keep the model alive


def test_a_forward_keeps_its_model_alive():
    import gc

    forward = make_forward(_model(5))  # no other reference to the model
    gc.collect()
    x = _batches()[0][0]
    assert keras.ops.convert_to_numpy(forward(x)).shape == (8, 3)
