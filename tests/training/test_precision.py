import keras
import numpy as np
import pytest
from training_helpers import blobs, sparse_ce, tiny_mlp

from cvbench.training import TrainConfig, Trainer
from cvbench.training.precision import resolve_precision


def fp16_trainer(**config):
    settings = dict(log_every=0, progress_bar=False, seed=0, loss_scale=1024.0)
    settings.update(config)
    return Trainer(
        tiny_mlp,
        sparse_ce(),
        schedule=0.2,
        precision="fp16",
        distribution="single",
        metrics=["accuracy"],
        config=TrainConfig(**settings),
    )


def values(variables):
    return [keras.ops.convert_to_numpy(v.value).copy() for v in variables]


@pytest.mark.filterwarnings("ignore:precision mixed_float16 without a GPU")
def test_mixed_float16_keeps_float32_variables_and_skips_an_overflowing_step():
    trainer = fp16_trainer()
    model = trainer.model
    assert all(v.dtype == "float32" for v in model.variables)
    assert model.layers[1].compute_dtype == "float16"
    x, y = blobs(8)
    x[:4] = 1e6  # beyond float16's range (65504): the first batch's gradients are inf/NaN
    before = values(model.variables)
    trainer.fit((x[:4], y[:4]), epochs=1, batch_size=4)
    assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    assert trainer.loss_scale == 512.0  # 1024 halved
    assert int(trainer.optimizer.inner_optimizer.iterations.numpy()) == 0  # no update applied
    for a, b in zip(before, values(model.variables), strict=True):
        np.testing.assert_array_equal(a, b)
    trainer.fit((x[4:], y[4:]), epochs=2, batch_size=4)  # a finite batch: applied
    assert int(trainer.optimizer.inner_optimizer.iterations.numpy()) == 1
    assert trainer.loss_scale == 512.0
    assert not all(
        np.array_equal(a, b) for a, b in zip(before, values(model.variables), strict=True)
    )


@pytest.mark.filterwarnings("ignore:precision mixed_float16 without a GPU")
def test_a_tiny_task_converges_in_mixed_float16():
    trainer = fp16_trainer(loss_scale=2.0**15)
    x, y = blobs(64)
    start = trainer.evaluate((x, y), batch_size=64)
    trainer.fit((x, y), epochs=4, batch_size=8)  # 32 steps
    end = trainer.evaluate((x, y), batch_size=64)
    assert end["accuracy"] == 1.0
    assert end["loss"] < 0.1 < start["loss"]
    assert trainer.loss_scale is not None and trainer.loss_scale >= 1.0


def test_mixed_bfloat16_needs_no_loss_scaling():
    trainer = Trainer(
        tiny_mlp,
        sparse_ce(),
        schedule=0.2,
        precision="bf16",
        distribution="single",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0),
    )
    assert trainer.model.layers[1].compute_dtype == "bfloat16"
    x, y = blobs(16)
    trainer.fit((x, y), epochs=1, batch_size=8)
    assert not isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    assert trainer.loss_scale is None
    assert all(v.dtype == "float32" for v in trainer.model.variables)
    assert keras.config.dtype_policy().name == "float32"  # the global policy is restored


@pytest.mark.backend_agnostic
def test_precision_names_and_auto():
    assert resolve_precision("auto", has_gpu=True) == "mixed_float16"
    assert resolve_precision("auto", has_gpu=False) == "mixed_bfloat16"
    assert resolve_precision("bf16", has_gpu=False) == "mixed_bfloat16"
    assert resolve_precision("fp32", has_gpu=True) == "float32"
    with pytest.warns(UserWarning, match="without a GPU"):
        assert resolve_precision("fp16", has_gpu=False) == "mixed_float16"
    with pytest.raises(ValueError, match="unknown precision 'half'"):
        resolve_precision("half")
