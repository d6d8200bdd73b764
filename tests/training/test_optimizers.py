import keras
import numpy as np
import pytest

from cvbench.training.config import OptimizerConfig
from cvbench.training.optimizers import LARS, MomentumSGD, build_optimizer
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
