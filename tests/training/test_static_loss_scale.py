"""Static loss scaling (`TrainConfig(dynamic_loss_scale=False)`), NVIDIA's `--static_loss_scale`.

The scale never changes: a non-finite step is skipped (as under dynamic scaling) without
halving it, and finite steps never double it.
"""

import shutil

import keras
import numpy as np
import pytest
from training_helpers import blobs, sparse_ce, tiny_mlp

from cvbench.training import TrainConfig, Trainer
from cvbench.training.precision import StaticLossScaleOptimizer, loss_scale_optimizer


def numpy(value):
    return keras.ops.convert_to_numpy(value)


def fp16_trainer(**config):
    settings = dict(log_every=0, progress_bar=False, seed=0, loss_scale=128.0)
    settings.update(config)
    return Trainer(
        tiny_mlp,
        sparse_ce(),
        schedule=0.2,
        precision="fp16",
        distribution="single",
        config=TrainConfig(**settings),
    )


@pytest.mark.backend_agnostic
@pytest.mark.filterwarnings("ignore:precision mixed_float16 without a GPU")
@pytest.mark.parametrize("dynamic", [False, True])
def test_the_trainer_keeps_a_static_scale_through_overflow_and_growth(dynamic):
    # Growth after every finite step (loss_scale_growth_steps=1) makes a dynamic scale move
    # both ways: 128 -> 64 on the overflowing batch, 64 -> 128 -> 256 on two finite ones.
    trainer = fp16_trainer(dynamic_loss_scale=dynamic, loss_scale_growth_steps=1)
    x, y = blobs(12)
    x[:4] = 1e6  # beyond float16's range (65504): the first batch's gradients are inf/NaN
    before = [numpy(v.value).copy() for v in trainer.model.variables]
    trainer.fit((x[:4], y[:4]), epochs=1, batch_size=4)
    assert int(numpy(trainer.optimizer.iterations)) == 0  # skipped
    for a, v in zip(before, trainer.model.variables, strict=True):
        np.testing.assert_array_equal(a, numpy(v.value))
    assert trainer.loss_scale == (64.0 if dynamic else 128.0)
    trainer.fit((x[4:], y[4:]), epochs=2, batch_size=4)  # a second epoch: two finite steps
    assert int(numpy(trainer.optimizer.iterations)) == 2
    assert trainer.loss_scale == (256.0 if dynamic else 128.0)
    assert isinstance(trainer.optimizer, StaticLossScaleOptimizer) != dynamic


def variables_and_optimizer(scale=128.0):
    w = keras.Variable(np.array([1.0, 2.0], "float32"))
    optimizer = StaticLossScaleOptimizer(keras.optimizers.SGD(0.1), scale=scale)
    optimizer.build([w])
    return w, optimizer


def test_apply_unscales_and_skips_non_finite_gradients():
    # The path of the TensorFlow train step (on JAX, Keras' stateful `apply` of a loss-scale
    # optimizer cannot run outside `jit`; its train step uses `stateless_apply`, next test).
    w, optimizer = variables_and_optimizer()
    assert float(numpy(optimizer.scale_loss(0.5))) == 64.0  # 0.5 x 128
    # Gradients of the scaled loss, 128 x (0.5, -1): SGD(0.1) moves w by -0.1 x (0.5, -1).
    optimizer.apply([keras.ops.convert_to_tensor(np.array([64.0, -128.0], "float32"))], [w])
    np.testing.assert_allclose(numpy(w.value), [0.95, 2.1], rtol=1e-6)
    assert int(numpy(optimizer.iterations)) == 1
    optimizer.apply([keras.ops.convert_to_tensor(np.array([np.inf, 1.0], "float32"))], [w])
    np.testing.assert_allclose(numpy(w.value), [0.95, 2.1], rtol=1e-6)  # skipped
    assert int(numpy(optimizer.iterations)) == 1
    assert float(numpy(optimizer.dynamic_scale)) == 128.0  # not halved


@pytest.mark.backend_agnostic
def test_stateless_apply_unscales_and_skips_non_finite_gradients():
    # The path of the JAX train step (TensorFlow's uses `apply`: Keras refuses stateless_apply
    # there, which the TensorFlow run of this test checks instead).
    w, optimizer = variables_and_optimizer()
    state = [v.value for v in optimizer.variables]
    grads = [keras.ops.convert_to_tensor(np.array([64.0, -128.0], "float32"))]
    if keras.config.backend() == "tensorflow":
        with pytest.raises(ValueError, match="stateless_apply is not supported"):
            optimizer.stateless_apply(state, grads, [w.value])
        return
    (new_w,), new_state = optimizer.stateless_apply(state, grads, [w.value])
    np.testing.assert_allclose(numpy(new_w), [0.95, 2.1], rtol=1e-6)
    index = [i for i, v in enumerate(optimizer.variables) if v is optimizer.iterations][0]
    scale_index = [i for i, v in enumerate(optimizer.variables) if v is optimizer.dynamic_scale][0]
    assert int(numpy(new_state[index])) == 1
    bad = [keras.ops.convert_to_tensor(np.array([np.nan, 1.0], "float32"))]
    (same_w,), same_state = optimizer.stateless_apply(new_state, bad, [new_w])
    np.testing.assert_allclose(numpy(same_w), [0.95, 2.1], rtol=1e-6)
    assert int(numpy(same_state[index])) == 1
    assert float(numpy(same_state[scale_index])) == 128.0


def test_a_restored_scale_variable_does_not_change_the_static_scale():
    # A checkpoint written under dynamic scaling restores dynamic_scale = 4096: the static
    # optimizer still multiplies by its own 128.
    w, optimizer = variables_and_optimizer()
    optimizer.dynamic_scale.assign(4096.0)
    assert float(numpy(optimizer.scale_loss(1.0))) == 128.0
    optimizer.apply([keras.ops.convert_to_tensor(np.array([128.0, 128.0], "float32"))], [w])
    np.testing.assert_allclose(numpy(w.value), [0.9, 1.9], rtol=1e-6)


@pytest.mark.backend_agnostic
def test_config_round_trip_and_bad_values():
    optimizer = StaticLossScaleOptimizer(keras.optimizers.SGD(0.1), scale=128.0)
    again = StaticLossScaleOptimizer.from_config(optimizer.get_config())
    assert again.scale == 128.0 and isinstance(again.inner_optimizer, keras.optimizers.SGD)
    for bad in (0.0, -1.0, float("inf"), "128", True):
        with pytest.raises(ValueError, match=f"static loss scale .*got {bad!r}"):
            StaticLossScaleOptimizer(keras.optimizers.SGD(0.1), scale=bad)
    with pytest.raises(ValueError, match="dynamic_loss_scale must be True or False, got 'no'"):
        TrainConfig(dynamic_loss_scale="no")
    with pytest.raises(ValueError, match="dynamic must be True or False, got 1"):
        loss_scale_optimizer(keras.optimizers.SGD(0.1), dynamic=1, scale=2.0, growth_steps=1)
    dynamic = loss_scale_optimizer(
        keras.optimizers.SGD(0.1), dynamic=True, scale=2.0**15, growth_steps=2000
    )
    assert type(dynamic) is keras.optimizers.LossScaleOptimizer
    assert (dynamic.initial_scale, dynamic.dynamic_growth_steps) == (2.0**15, 2000)
    assert TrainConfig().dynamic_loss_scale is True


@pytest.mark.filterwarnings("ignore:precision mixed_float16 without a GPU")
def test_a_static_run_resumes_from_its_checkpoint(tmp_path):
    x, y = blobs(16)
    settings = dict(dynamic_loss_scale=False, export=False, checkpoint_every=2, keep_checkpoints=9)
    full = fp16_trainer(log_dir=str(tmp_path / "full"), **settings)
    full.fit((x, y), epochs=2, batch_size=4)  # 8 steps, checkpoints every 2
    # A run that stopped after step 2 has only that checkpoint.
    (tmp_path / "cut" / "checkpoints").mkdir(parents=True)
    name = "ckpt-0000000002.npz"
    shutil.copy(tmp_path / "full" / "checkpoints" / name, tmp_path / "cut" / "checkpoints" / name)
    resumed = fp16_trainer(log_dir=str(tmp_path / "cut"), resume=True, **settings)
    resumed.fit((x, y), epochs=2, batch_size=4)
    assert resumed.state["step"] == 8 and int(numpy(resumed.optimizer.iterations)) == 8
    assert isinstance(resumed.optimizer, StaticLossScaleOptimizer)
    assert resumed.loss_scale == 128.0
    for a, b in zip(full.model.variables, resumed.model.variables, strict=True):
        np.testing.assert_allclose(numpy(a.value), numpy(b.value), rtol=1e-5, atol=1e-6)
