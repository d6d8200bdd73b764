import warnings

import keras
import numpy as np
import pytest
from training_helpers import blobs, sparse_ce, tiny_mlp

from cvbench.training import TrainConfig, Trainer
from cvbench.training import precision as precision_module
from cvbench.training.precision import cpu_flags, cpu_has_fast_bfloat16, resolve_precision


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


@pytest.mark.filterwarnings("ignore:precision mixed_bfloat16 on a CPU without")
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


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Each warning of `resolve_precision` is given once per process: start with none given."""
    monkeypatch.setattr(precision_module, "_WARNED", set())


AVX2 = frozenset({"fpu", "sse4_2", "avx2", "fma"})  # this test machine (AMD EPYC, no bf16)


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    "has_gpu, flags, expected",
    [
        (True, AVX2, "mixed_float16"),  # a GPU: NVIDIA's AMP recipes
        (False, AVX2 | {"avx512f", "avx512_bf16"}, "mixed_bfloat16"),  # Cooper Lake, Zen 4
        (False, AVX2 | {"amx_bf16", "amx_tile"}, "mixed_bfloat16"),  # Sapphire Rapids
        (False, AVX2 | {"avx512f"}, "float32"),  # AVX-512 without bf16: emulated
        (False, AVX2, "float32"),
        (False, frozenset(), "float32"),  # no /proc/cpuinfo
    ],
)
def test_auto_picks_what_the_hardware_computes_fast(has_gpu, flags, expected, recwarn):
    assert resolve_precision("auto", has_gpu=has_gpu, flags=flags) == expected
    assert not recwarn.list  # "auto" never warns


@pytest.mark.backend_agnostic
def test_precision_names(fresh_warnings):
    assert resolve_precision("bf16", has_gpu=False, flags={"amx_bf16"}) == "mixed_bfloat16"
    assert resolve_precision("bf16", has_gpu=True, flags=AVX2) == "mixed_bfloat16"
    assert resolve_precision("fp32", has_gpu=True) == "float32"
    assert resolve_precision("float32") == "float32"
    with pytest.raises(ValueError, match="unknown precision 'half'"):
        resolve_precision("half")


@pytest.mark.backend_agnostic
def test_slow_precisions_warn_once_each(fresh_warnings):
    with pytest.warns(UserWarning, match="mixed_float16 without a GPU"):
        assert resolve_precision("fp16", has_gpu=False, flags=AVX2) == "mixed_float16"
    with pytest.warns(UserWarning, match="mixed_bfloat16 on a CPU without native bfloat16"):
        assert resolve_precision("bf16", has_gpu=False, flags=AVX2) == "mixed_bfloat16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        assert resolve_precision("fp16", has_gpu=False, flags=AVX2) == "mixed_float16"
        assert resolve_precision("mixed_bfloat16", has_gpu=False, flags=AVX2) == ("mixed_bfloat16")


@pytest.mark.backend_agnostic
def test_cpu_flags_reads_the_first_cpu(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    )
    assert cpu_flags(info) == frozenset({"fpu", "avx2", "amx_bf16"})
    assert cpu_has_fast_bfloat16(cpu_flags(info))
    assert cpu_flags(tmp_path / "missing") == frozenset()
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert cpu_flags(tmp_path / "arm") == frozenset({"fp", "asimd", "bf16"})
    assert not cpu_has_fast_bfloat16(cpu_flags(tmp_path / "arm"))  # ARM bf16: not in BF16_CPU_FLAGS
