import sys
import warnings
from types import SimpleNamespace

import keras
import numpy as np
import pytest
from training_helpers import blobs, sparse_ce, tiny_mlp

from cvbench.training import TrainConfig, Trainer
from cvbench.training import precision as precision_module
from cvbench.training.precision import (
    StaticLossScaleOptimizer,
    backend_has_gpu,
    build_model_with_policy,
    check_model_policy,
    cpu_has_fast_bfloat16,
    dtype_policy_scope,
    loss_scale_optimizer,
    resolve_precision,
)


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
@pytest.mark.parametrize("flags, fast", [({"avx2", "amx_bf16"}, True), ({"avx2"}, False)])
def test_no_flags_means_this_machines_flags(monkeypatch, fresh_warnings, flags, fast):
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset(flags))
    assert cpu_has_fast_bfloat16() is fast
    expected = "mixed_bfloat16" if fast else "float32"
    assert resolve_precision("auto", has_gpu=False) == expected


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
@pytest.mark.parametrize("gpu", [True, False])
def test_backend_has_gpu_asks_the_active_backend_only(monkeypatch, backend, gpu):
    # Each backend's device list is faked; the other backends answer the opposite, so asking
    # the wrong one shows.
    import jax
    import tensorflow as tf

    def answer(name):
        return gpu if name == backend else not gpu

    monkeypatch.setattr(keras.config, "backend", lambda: backend)
    monkeypatch.setattr(
        tf.config, "list_physical_devices", lambda kind: ["GPU:0"] if answer("tensorflow") else []
    )
    platforms = ["cpu", "gpu"] if answer("jax") else ["cpu"]
    monkeypatch.setattr(jax, "devices", lambda: [SimpleNamespace(platform=p) for p in platforms])
    cuda = SimpleNamespace(is_available=lambda: answer("torch"))
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    assert backend_has_gpu() is gpu


@pytest.mark.backend_agnostic
def test_backend_has_gpu_is_false_for_other_backends(monkeypatch):
    monkeypatch.setattr(keras.config, "backend", lambda: "numpy")
    assert backend_has_gpu() is False


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("gpu, warns", [(True, False), (False, True)])
def test_a_precision_without_has_gpu_detects_the_gpu(monkeypatch, fresh_warnings, gpu, warns):
    monkeypatch.setattr(precision_module, "backend_has_gpu", lambda: gpu)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_precision("fp16", flags=AVX2) == "mixed_float16"
    assert [str(w.message).startswith("precision mixed_float16 without") for w in caught] == (
        [True] if warns else []
    )


@pytest.mark.backend_agnostic
def test_fast_precisions_do_not_warn(fresh_warnings):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_precision("fp16", has_gpu=True, flags=AVX2) == "mixed_float16"
        assert resolve_precision("bf16", has_gpu=True, flags=AVX2) == "mixed_bfloat16"
        assert resolve_precision("bf16", has_gpu=False, flags={"amx_bf16"}) == "mixed_bfloat16"


@pytest.mark.backend_agnostic
def test_the_warning_points_at_the_callers_line(fresh_warnings):
    with pytest.warns(UserWarning, match="mixed_bfloat16 on a CPU") as caught:
        resolve_precision("bf16", has_gpu=False, flags=AVX2)
    assert [w.filename for w in caught] == [__file__]


def two_dense():
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Dense(2)(inputs)))


@pytest.mark.backend_agnostic
def test_build_model_with_policy_and_check_model_policy():
    model = build_model_with_policy(two_dense, "mixed_bfloat16")
    assert [layer.dtype_policy.name for layer in model.layers[1:]] == ["mixed_bfloat16"] * 2
    check_model_policy(model, "mixed_bfloat16")  # no error
    with pytest.raises(ValueError, match=r"dtype policies \['mixed_bfloat16'\] but precision"):
        check_model_policy(model, "float32")
    check_model_policy(keras.Sequential([keras.Input((3,)), keras.layers.ReLU()]), "float32")
    with pytest.raises(ValueError, match="must return a keras.Model, got <class 'str'>"):
        build_model_with_policy(lambda: "model", "float32")


@pytest.mark.backend_agnostic
def test_check_model_policy_looks_at_the_layers_not_the_wrappers():
    # Layers made outside the policy, the Model object made inside it: still refused.
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(2)(inputs)  # float32
    with dtype_policy_scope("mixed_bfloat16"):
        wrapper = keras.Model(inputs, outputs)
    with pytest.raises(ValueError, match=r"dtype policies \['float32'\]"):
        check_model_policy(wrapper, "mixed_bfloat16")
    # The reverse, nested: a float32 Sequential around a sub-model whose own object is float32
    # but whose Dense layer was made under the policy: the nested layer counts.
    with dtype_policy_scope("mixed_bfloat16"):
        dense = keras.layers.Dense(2)
    inner = keras.Sequential([keras.Input((3,)), dense])
    outer = keras.Sequential([keras.Input((3,)), inner])
    check_model_policy(outer, "mixed_bfloat16")  # no error


def sgd_w():
    return keras.Variable(np.array([1.0, 2.0], "float32")), keras.optimizers.SGD(0.1)


@pytest.mark.backend_agnostic
def test_static_loss_scale_default_accepted_and_refused_scales():
    assert StaticLossScaleOptimizer(keras.optimizers.SGD(0.1)).scale == 128.0  # NVIDIA's
    for good in (0.5, 1, 1e4):  # a scale below 1 is legal (it shrinks the loss)
        assert StaticLossScaleOptimizer(keras.optimizers.SGD(0.1), scale=good).scale == good
    for bad in (0.0, -2.0, float("nan"), float("inf"), "128", True, None):
        with pytest.raises(ValueError, match=f"finite number > 0, got {bad!r}"):
            StaticLossScaleOptimizer(keras.optimizers.SGD(0.1), scale=bad)


def test_static_loss_scale_unscales_except_none_and_overwritten_gradients():
    # scale 4: the loss is multiplied by 4, the gradients divided by 4 before SGD(0.1).
    w, sgd = sgd_w()
    counter = keras.Variable(np.array([3.0], "float32"))
    counter.overwrite_with_gradient = True  # Keras' float8 statistics: "gradient" = new value
    optimizer = StaticLossScaleOptimizer(sgd, scale=4.0)
    assert float(keras.ops.convert_to_numpy(optimizer.scale_loss(2.5))) == 10.0
    optimizer.build([w, counter])
    grads = [np.array([4.0, -8.0], "float32"), np.array([5.0], "float32")]
    optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads])  # the built variables
    # w - 0.1 * (4, -8) / 4 = (0.9, 2.2); the counter takes its "gradient" 5 as it is.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(w.value), [0.9, 2.2], rtol=1e-6)
    assert keras.ops.convert_to_numpy(counter.value).tolist() == [5.0]
    with pytest.warns(UserWarning, match="Gradients do not exist"):
        optimizer.apply([None, keras.ops.convert_to_tensor(np.array([7.0], "float32"))])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(w.value), [0.9, 2.2], rtol=1e-6)
    assert keras.ops.convert_to_numpy(counter.value).tolist() == [7.0]
    again = StaticLossScaleOptimizer.from_config(optimizer.get_config())
    assert again.scale == 4.0 and "initial_scale" not in optimizer.get_config()


@pytest.mark.backend_agnostic
def test_loss_scale_optimizer_kinds():
    static = loss_scale_optimizer(
        keras.optimizers.SGD(0.1), dynamic=False, scale=64.0, growth_steps=5
    )
    assert type(static) is StaticLossScaleOptimizer and static.scale == 64.0
    dynamic = loss_scale_optimizer(
        keras.optimizers.SGD(0.1), dynamic=True, scale=64.0, growth_steps=5
    )
    assert type(dynamic) is keras.optimizers.LossScaleOptimizer
    assert (dynamic.initial_scale, dynamic.dynamic_growth_steps) == (64.0, 5)
    with pytest.raises(ValueError, match="dynamic must be True or False, got 'yes'"):
        loss_scale_optimizer(keras.optimizers.SGD(0.1), dynamic="yes", scale=2.0, growth_steps=1)


@pytest.mark.backend_agnostic
def test_static_loss_scale_stateless_apply():
    # The JAX train step's path (TensorFlow refuses stateless_apply: checked there instead).
    w, sgd = sgd_w()
    optimizer = StaticLossScaleOptimizer(sgd, scale=4.0)
    optimizer.build([w])
    state = [v.value for v in optimizer.variables]
    grads = [keras.ops.convert_to_tensor(np.array([4.0, -8.0], "float32"))]
    if keras.config.backend() == "tensorflow":
        with pytest.raises(ValueError, match="stateless_apply is not supported"):
            optimizer.stateless_apply(state, grads, [w.value])
        return
    # w - 0.1 * (4, -8) / 4 = (0.9, 2.2); the inner iteration counter moves to 1.
    (new_w,), new_state = optimizer.stateless_apply(state, grads, [w.value])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(new_w), [0.9, 2.2], rtol=1e-6)
    assert len(new_state) == len(state)
    inner_iterations = [i for i, v in enumerate(optimizer.variables) if v is sgd.iterations]
    assert [int(keras.ops.convert_to_numpy(new_state[i])) for i in inner_iterations] == [1]
    # A non-finite gradient: weights and state come back unchanged.
    bad = [keras.ops.convert_to_tensor(np.array([np.inf, 1.0], "float32"))]
    (same_w,), same_state = optimizer.stateless_apply(new_state, bad, [new_w])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(same_w), [0.9, 2.2], rtol=1e-6)
    assert [int(keras.ops.convert_to_numpy(same_state[i])) for i in inner_iterations] == [1]
    with pytest.raises(ValueError, match="shorter"):  # a state list of the wrong length
        optimizer.stateless_apply(state[:-1], grads, [w.value])


def test_static_loss_scale_refuses_fewer_gradients_than_variables():
    # One gradient for two built variables: refused (zip is strict), nothing moves, rather
    # than the first variable stepping alone.
    w, sgd = sgd_w()
    other = keras.Variable(np.array([3.0], "float32"))
    optimizer = StaticLossScaleOptimizer(sgd, scale=4.0)
    optimizer.build([w, other])
    with pytest.raises(ValueError, match="zip.. argument 2 is longer than argument 1"):
        optimizer.apply([keras.ops.convert_to_tensor(np.array([4.0, -8.0], "float32"))])
    assert keras.ops.convert_to_numpy(w.value).tolist() == [1.0, 2.0]
