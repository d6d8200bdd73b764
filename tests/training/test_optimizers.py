import keras
import numpy as np
import pytest

from cvbench.training.config import OptimizerConfig, ScheduleConfig, TrainConfig
from cvbench.training.distributed import Distribution
from cvbench.training.optimizers import (
    LARS,
    MomentumSGD,
    assemble_optimizer,
    build_optimizer,
    check_optimizer_args,
    exclude_normalization_and_bias,
)
from cvbench.training.precision import StaticLossScaleOptimizer
from cvbench.training.schedules import WarmupSchedule

pytestmark = pytest.mark.backend_agnostic


def step(optimizer, variable, gradient):
    optimizer.apply([keras.ops.convert_to_tensor(np.asarray(gradient, "float32"))], [variable])
    return keras.ops.convert_to_numpy(variable.value)


def test_momentum_accumulates_gradients_and_lr_multiplies_the_step():
    # TF1 MomentumOptimizer: v = 0.9 v + g; w -= lr v. With g = 1: v = 1, 1.9.
    # The rate is 0.1 at step 0 and 0.2 at step 1 (constant schedule boundaries):
    # w = 1 - 0.1 * 1 = 0.9, then 0.9 - 0.2 * 1.9 = 0.52. (Keras' SGD would give 0.61.)
    rate = WarmupSchedule(0.1, total_steps=10, decay="step", boundaries=[1], decay_rate=2.0)
    opt = MomentumSGD(learning_rate=rate, momentum=0.9)
    w = keras.Variable([1.0])
    assert step(opt, w, [1.0]) == pytest.approx([0.9])
    assert step(opt, w, [1.0]) == pytest.approx([0.52])


def test_nesterov():
    # v = 1: w = 1 - 0.1 (1 + 0.9 * 1) = 0.81; v = 1.9: w = 0.81 - 0.1 (1 + 0.9 * 1.9) = 0.539.
    opt = MomentumSGD(learning_rate=0.1, momentum=0.9, nesterov=True)
    w = keras.Variable([1.0])
    assert step(opt, w, [1.0]) == pytest.approx([0.81])
    assert step(opt, w, [1.0]) == pytest.approx([0.539])


def test_weight_decay_is_an_l2_gradient_term():
    # g = 0 + 0.1 * 2 = 0.2; no momentum, lr 1: w = 2 - 0.2 = 1.8.
    opt = MomentumSGD(learning_rate=1.0, momentum=0.0, weight_decay=0.1)
    w = keras.Variable([2.0])
    assert step(opt, w, [0.0]) == pytest.approx([1.8])


def _model_with_batchnorm():
    inputs = keras.Input((3,))
    x = keras.layers.Dense(2)(inputs)
    x = keras.layers.BatchNormalization()(x)
    return keras.Model(inputs, keras.layers.Dense(1)(x))


@pytest.mark.parametrize(
    "decay_batchnorm, decay_bias, changed",
    [
        (False, False, {"kernel"}),
        (True, False, {"kernel", "gamma", "beta"}),
        (False, True, {"kernel", "bias"}),
    ],
)
def test_weight_decay_skips_batchnorm_and_biases_by_default(decay_batchnorm, decay_bias, changed):
    model = _model_with_batchnorm()
    for v in model.trainable_variables:  # non-zero everywhere, so decay shows
        v.assign(np.ones(v.shape, "float32"))
    config = OptimizerConfig(
        momentum=0.0, weight_decay=0.5, decay_batchnorm=decay_batchnorm, decay_bias=decay_bias
    )
    opt = build_optimizer(config, 1.0, model)
    grads = [keras.ops.zeros(v.shape) for v in model.trainable_variables]
    opt.apply(grads, model.trainable_variables)
    seen = set()
    for v in model.trainable_variables:
        value = keras.ops.convert_to_numpy(v.value)
        if not np.allclose(value, 1.0):
            assert np.allclose(value, 0.5)  # 1 - 1.0 * 0.5 * 1
            seen.add(v.name)
    assert seen == changed


@pytest.mark.parametrize("mode, expected", [("clip", [3.0, 3.0]), ("scale", [3.0, 3.75])])
def test_lars_local_rate(mode, expected):
    # ||w|| = 5, ||g|| = 10, eta 0.5: local rate 0.25. lr 0.1.
    # clip: factor min(0.25 / 0.1, 1) = 1 -> w = [3, 4 - 0.1 * 10] = [3, 3];
    # scale: factor 0.25 -> w = [3, 4 - 0.1 * 2.5] = [3, 3.75].
    opt = LARS(learning_rate=0.1, momentum=0.0, eta=0.5, mode=mode)
    w = keras.Variable([3.0, 4.0])
    assert step(opt, w, [0.0, 10.0]) == pytest.approx(expected)


def test_lars_clip_limits_the_step_when_the_local_rate_is_small():
    # local 0.25, lr 1.0: factor 0.25 -> w = [3, 4 - 1.0 * 2.5] = [3, 1.5].
    opt = LARS(learning_rate=1.0, momentum=0.0, eta=0.5, mode="clip")
    w = keras.Variable([3.0, 4.0])
    assert step(opt, w, [0.0, 10.0]) == pytest.approx([3.0, 1.5])


def test_lars_uses_epsilon_for_zero_weights():
    # ||w|| = 0: local rate = epsilon 1.0; clip: min(1 / 0.1, 1) = 1 -> w = -0.1 * g.
    opt = LARS(learning_rate=0.1, momentum=0.0, eta=0.001, mode="clip", epsilon=1.0)
    w = keras.Variable([0.0, 0.0])
    assert step(opt, w, [1.0, -2.0]) == pytest.approx([-0.1, 0.2])


def test_config_round_trip_and_build_optimizer_choice():
    opt = build_optimizer(OptimizerConfig(name="lars", larc_eta=0.01, larc_mode="scale"), 0.5)
    assert isinstance(opt, LARS)
    again = LARS.from_config(opt.get_config())
    assert (again.eta, again.mode, again.l2_weight_decay) == (0.01, "scale", opt.l2_weight_decay)
    assert isinstance(build_optimizer(OptimizerConfig(), 0.1), MomentumSGD)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "adam"}, "name"),
        ({"momentum": 1.0}, "momentum"),
        ({"larc_mode": "trim"}, "larc_mode"),
        ({"weight_decay": -1e-4}, "weight_decay"),
        ({"momentum": 0.0, "nesterov": True}, "nesterov"),
    ],
)
def test_bad_optimizer_configs_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OptimizerConfig(**kwargs)


def test_momentum_sgd_defaults():
    # MomentumSGD(): lr 0.1, momentum 0.9, no Nesterov, no weight decay. g = 1 twice:
    # v = 1, w = 2 - 0.1 * 1 = 1.9; v = 0.9 * 1 + 1 = 1.9, w = 1.9 - 0.1 * 1.9 = 1.71.
    opt = MomentumSGD()
    w = keras.Variable([2.0])
    assert step(opt, w, [1.0]) == pytest.approx([1.9])
    assert step(opt, w, [1.0]) == pytest.approx([1.71])


def test_no_momentum_keeps_no_velocity():
    # momentum 0: no per-weight slot (no memory, none in checkpoints); 0.5: one per weight.
    w = keras.Variable([1.0, 2.0])
    names = []
    for momentum in (0.0, 0.5):
        opt = MomentumSGD(learning_rate=0.1, momentum=momentum)
        opt.build([w])
        names.append([v.name for v in opt.variables])
    assert names[0] == ["iteration", "learning_rate"]
    assert names[1] == ["iteration", "learning_rate", "variable_momentum"]


@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (MomentumSGD, {"momentum": 1.0}, r"momentum must be in \[0, 1\), got 1.0"),
        (MomentumSGD, {"momentum": -0.1}, r"momentum must be in \[0, 1\), got -0.1"),
        (MomentumSGD, {"weight_decay": -1e-4}, "weight_decay must be >= 0, got -0.0001"),
        (MomentumSGD, {"weight_decay": None}, "weight_decay must be >= 0, got None"),
        (LARS, {"mode": "trim"}, "mode must be 'clip' or 'scale', got 'trim'"),
        (LARS, {"eta": 0.0}, "eta and epsilon must be > 0, got eta=0.0"),
        (LARS, {"epsilon": 0.0}, "eta and epsilon must be > 0, got eta=0.003, epsilon=0.0"),
    ],
)
def test_bad_optimizer_arguments_name_the_value(cls, kwargs, message):
    # The optimizers' own checks (not OptimizerConfig's): optimizers built by hand.
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


def test_lars_defaults():
    # LARS(): lr 0.1, momentum 0.9 without Nesterov, eta 0.003, clip, epsilon 1.0.
    # Zero weights: local rate = epsilon = 1; clip: min(1 / 0.1, 1) = 1, so g is unchanged,
    # v = g and w = 0 - 0.1 * g = [-0.1, 0.2] (Nesterov would step 0.1 * 1.9 g).
    w = keras.Variable([0.0, 0.0])
    assert step(LARS(), w, [1.0, -2.0]) == pytest.approx([-0.1, 0.2])
    # mode "scale" multiplies by the local rate itself: epsilon 1.0 -> w = -0.1 * g.
    w = keras.Variable([0.0, 0.0])
    assert step(LARS(mode="scale", momentum=0.0), w, [1.0, -2.0]) == pytest.approx([-0.1, 0.2])


def test_lars_local_rate_of_weights_with_a_norm_below_one():
    # ||w|| = 0.5 (a norm > 0, if below 1, is a real norm, not epsilon's case), ||g|| = 10,
    # eta 0.5: local 0.5 * 0.5 / 10 = 0.025; scale, lr 1: w = [0.3, 0.4 - 0.025 * 10].
    opt = LARS(learning_rate=1.0, momentum=0.0, eta=0.5, mode="scale")
    w = keras.Variable([0.3, 0.4])
    assert step(opt, w, [0.0, 10.0]) == pytest.approx([0.3, 0.15])


def _nested_model():
    # The BatchNormalization sits in a nested Sequential: its variables must still be found.
    inner = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2), keras.layers.BatchNormalization()]
    )
    return keras.Sequential([keras.Input((3,)), inner, keras.layers.Dense(1)])


def test_exclude_normalization_and_bias_defaults_and_nested_layers():
    model = _nested_model()
    opt = MomentumSGD(learning_rate=1.0, momentum=0.0, weight_decay=0.5)
    excluded = exclude_normalization_and_bias(opt, model)
    assert sorted(v.path.split("/", 1)[1] for v in excluded) == [
        "batch_normalization/beta",
        "batch_normalization/gamma",
        "dense/bias",
        "dense_1/bias",
    ]
    for v in model.trainable_variables:
        v.assign(np.ones(v.shape, "float32"))
    opt.apply(
        [keras.ops.zeros(v.shape) for v in model.trainable_variables], model.trainable_variables
    )
    # Only the kernels decay: 1 - 1.0 * 0.5 * 1 = 0.5; the excluded stay at 1.
    after = {v.name: float(np.unique(keras.ops.convert_to_numpy(v.value))[0]) for v in excluded}
    assert after == {"bias": 1.0, "gamma": 1.0, "beta": 1.0}
    kernels = [v for v in model.trainable_variables if v.name == "kernel"]
    assert [np.unique(keras.ops.convert_to_numpy(v.value)).tolist() for v in kernels] == [
        [0.5],
        [0.5],
    ]


class RecordingDistribution(Distribution):
    """One process that records the optimizer it is asked to wrap (the outermost wrapper)."""

    def wrap_optimizer(self, optimizer, compression="none"):
        self.wrapped = (optimizer, compression)
        return optimizer


def assemble(spec, schedule, precision="float32", config=None, steps_per_epoch=10):
    distribution = RecordingDistribution()
    optimizer = assemble_optimizer(
        spec,
        schedule,
        model=_model_with_batchnorm(),
        precision=precision,
        config=config or TrainConfig(),
        distribution=distribution,
        global_batch=512,
        steps_per_epoch=steps_per_epoch,
        epochs=3,
    )
    assert distribution.wrapped == (optimizer, "none")
    return optimizer


def test_assemble_optimizer_builds_the_config_with_its_schedule():
    # Peak 0.1 * 512 / 256 = 0.2 over 3 epochs x 10 steps = 30 steps.
    opt = assemble(OptimizerConfig(name="lars"), ScheduleConfig(base_lr=0.1, warmup_epochs=0))
    assert type(opt) is LARS
    schedule = opt._learning_rate  # the schedule object Keras evaluates each step
    assert isinstance(schedule, WarmupSchedule)
    assert (schedule.peak_lr, schedule.total_steps) == (pytest.approx(0.2), 30)
    plain = assemble(OptimizerConfig(), 0.05)  # a float rate is used as it is
    assert type(plain) is MomentumSGD
    assert float(keras.ops.convert_to_numpy(plain.learning_rate)) == pytest.approx(0.05)
    ready = keras.optimizers.SGD(0.3)
    assert assemble(ready, None) is ready
    with pytest.raises(ValueError, match="pass steps_per_epoch"):
        assemble(OptimizerConfig(), ScheduleConfig(), steps_per_epoch=None)


def test_assemble_optimizer_adds_loss_scaling_for_mixed_float16_only():
    static = assemble(
        OptimizerConfig(),
        0.1,
        precision="mixed_float16",
        config=TrainConfig(dynamic_loss_scale=False, loss_scale=64.0),
    )
    assert type(static) is StaticLossScaleOptimizer and static.scale == 64.0
    assert type(static.inner_optimizer) is MomentumSGD
    dynamic = assemble(
        OptimizerConfig(),
        0.1,
        precision="mixed_float16",
        config=TrainConfig(loss_scale=512.0, loss_scale_growth_steps=7),
    )
    assert type(dynamic) is keras.optimizers.LossScaleOptimizer
    assert (dynamic.initial_scale, dynamic.dynamic_growth_steps) == (512.0, 7)
    scaled = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    assert assemble(scaled, None, precision="mixed_float16") is scaled  # not wrapped twice
    bf16 = assemble(OptimizerConfig(), 0.1, precision="mixed_bfloat16")
    assert type(bf16) is MomentumSGD


def test_check_optimizer_args_defaults_and_kinds():
    assert check_optimizer_args(None, None) == (OptimizerConfig(), ScheduleConfig())
    config = OptimizerConfig(name="lars")
    rate = WarmupSchedule(0.1)
    for schedule in (0.1, 2, rate, ScheduleConfig(base_lr=0.5)):
        assert check_optimizer_args(config, schedule) == (config, schedule)
    ready = keras.optimizers.SGD(0.1)
    assert check_optimizer_args(ready, None) == (ready, None)


@pytest.mark.parametrize(
    "optimizer, schedule, message",
    [
        ("sgd", None, "optimizer must be an OptimizerConfig or a keras optimizer, got 'sgd'"),
        (OptimizerConfig(), True, "schedule must be a ScheduleConfig.*got True"),
        (OptimizerConfig(), "0.1", "schedule must be a ScheduleConfig.*got '0.1'"),
        ("ready", 0.1, "schedule must be None when a ready optimizer is given.*got schedule=0.1"),
    ],
)
def test_check_optimizer_args_refuses_the_wrong_kinds(optimizer, schedule, message):
    if optimizer == "ready":
        optimizer = keras.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match=message):
        check_optimizer_args(optimizer, schedule)


def test_a_normalization_layer_given_alone_is_excluded():
    # The object given is classified with its sublayers: a bare LayerNormalization (a layer,
    # not a Model) has only normalization variables, so both are excluded.
    layer = keras.layers.LayerNormalization()
    layer.build((None, 3))
    excluded = exclude_normalization_and_bias(MomentumSGD(weight_decay=0.1), layer)
    assert sorted(v.name for v in excluded) == ["beta", "gamma"]
