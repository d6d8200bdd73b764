"""Momentum SGD and LARS/LARC with coupled L2 weight decay, as in NVIDIA's scripts.

Both follow TensorFlow 1's `MomentumOptimizer` (and PyTorch's SGD), not Keras' SGD: the
velocity accumulates raw gradients and the learning rate multiplies the step,

    g = grad + wd * w          (only for decayed variables)
    v = momentum * v + g
    w = w - lr * v             (Nesterov: w = w - lr * (g + momentum * v))

so that a changing learning rate affects the step at once (Keras folds it into the velocity).
Weight decay is the L2 term NVIDIA adds to the loss (`wd * sum(w^2) / 2`, gradient `wd * w`),
which therefore goes through momentum; it skips normalization layers and biases by default.

LARS (NVIDIA's LARC) rescales each variable's gradient (weight decay included) by its local
rate `eta * ||w|| / ||g||` (`epsilon` when a norm is zero): mode "clip" multiplies the gradient
by `min(local / lr, 1)`, mode "scale" by `local`.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from cvbench.training.config import OptimizerConfig, ScheduleConfig
from cvbench.training.precision import loss_scale_optimizer
from cvbench.training.schedules import build_schedule
from cvbench.utils.model_layers import all_layers

_NORMALIZATION_LAYERS = (
    keras.layers.BatchNormalization,
    keras.layers.LayerNormalization,
    keras.layers.GroupNormalization,
)


@keras.saving.register_keras_serializable(package="cvbench")
class MomentumSGD(keras.optimizers.Optimizer):
    """SGD with (Nesterov) momentum and coupled L2 weight decay.

    Example:
        >>> opt = MomentumSGD(learning_rate=0.1, momentum=0.9, weight_decay=0.0)
        >>> w = keras.Variable([1.0])
        >>> opt.apply([keras.ops.convert_to_tensor([1.0])], [w])
        >>> round(float(w.numpy()[0]), 6)  # v = 1; w = 1 - 0.1 * 1
        0.9

    Args:
        learning_rate: a float or a `LearningRateSchedule`.
        momentum: momentum coefficient in [0, 1).
        nesterov: use Nesterov momentum.
        weight_decay: L2 coefficient added to the gradient of decayed variables. Which
            variables are decayed is set by `exclude_from_weight_decay` (see
            `exclude_normalization_and_bias`).
        **kwargs: other `keras.optimizers.Optimizer` arguments (name, clipnorm, ...).
    """

    def __init__(
        self,
        learning_rate=0.1,
        momentum: float = 0.9,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        name: str = "momentum_sgd",
        **kwargs,
    ) -> None:
        # The base class' `weight_decay` is decoupled (AdamW style); ours is an L2 gradient term.
        kwargs.pop("weight_decay", None)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        if weight_decay is None or weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.l2_weight_decay = float(weight_decay)

    def build(self, variables) -> None:
        if self.built:
            return
        super().build(variables)
        self.momentums = []
        if self.momentum != 0:
            self.momentums = self.add_optimizer_variables(variables, "momentum")

    def _decayed_gradient(self, gradient, variable):
        gradient = ops.cast(gradient, variable.dtype)
        if self.l2_weight_decay and self._use_weight_decay(variable):
            gradient = gradient + ops.cast(self.l2_weight_decay, variable.dtype) * variable
        return gradient

    def _momentum_step(self, gradient, variable, learning_rate) -> None:
        learning_rate = ops.cast(learning_rate, variable.dtype)
        if self.momentum == 0:
            self.assign_sub(variable, learning_rate * gradient)
            return
        momentum = ops.cast(self.momentum, variable.dtype)
        velocity = self.momentums[self._get_variable_index(variable)]
        new_velocity = momentum * velocity + gradient
        self.assign(velocity, new_velocity)
        if self.nesterov:
            self.assign_sub(variable, learning_rate * (gradient + momentum * new_velocity))
        else:
            self.assign_sub(variable, learning_rate * new_velocity)

    def update_step(self, gradient, variable, learning_rate) -> None:
        self._momentum_step(self._decayed_gradient(gradient, variable), variable, learning_rate)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "momentum": self.momentum,
                "nesterov": self.nesterov,
                "weight_decay": self.l2_weight_decay,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="cvbench")
class LARS(MomentumSGD):
    """Momentum SGD with LARC layer-wise gradient rescaling (NVIDIA's Horovod script).

    Example:
        >>> opt = LARS(learning_rate=1.0, momentum=0.0, eta=0.5, mode="clip")
        >>> w = keras.Variable([3.0, 4.0])  # ||w|| = 5
        >>> opt.apply([keras.ops.convert_to_tensor([0.0, 10.0])], [w])  # ||g|| = 10
        >>> [round(float(x), 4) for x in w.numpy()]  # local 0.25, min(0.25/1, 1) = 0.25
        [3.0, 1.5]

    Args:
        learning_rate: a float or a `LearningRateSchedule`.
        momentum: momentum coefficient in [0, 1).
        nesterov: use Nesterov momentum.
        weight_decay: L2 coefficient (see `MomentumSGD`).
        eta: trust coefficient.
        mode: "clip" or "scale".
        epsilon: local rate when `||w||` or `||g||` is zero.
        **kwargs: other `keras.optimizers.Optimizer` arguments.
    """

    def __init__(
        self,
        learning_rate=0.1,
        momentum: float = 0.9,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        eta: float = 0.003,
        mode: str = "clip",
        epsilon: float = 1.0,
        name: str = "lars",
        **kwargs,
    ) -> None:
        super().__init__(
            learning_rate=learning_rate,
            momentum=momentum,
            nesterov=nesterov,
            weight_decay=weight_decay,
            name=name,
            **kwargs,
        )
        if mode not in ("clip", "scale"):
            raise ValueError(f"mode must be 'clip' or 'scale', got {mode!r}")
        if eta <= 0 or epsilon <= 0:
            raise ValueError(f"eta and epsilon must be > 0, got eta={eta!r}, epsilon={epsilon!r}")
        self.eta = float(eta)
        self.mode = mode
        self.epsilon = float(epsilon)

    def update_step(self, gradient, variable, learning_rate) -> None:
        gradient = self._decayed_gradient(gradient, variable)
        w_norm = ops.sqrt(ops.sum(ops.square(variable)))
        g_norm = ops.sqrt(ops.sum(ops.square(gradient)))
        both = ops.logical_and(ops.greater(w_norm, 0.0), ops.greater(g_norm, 0.0))
        ratio = self.eta * w_norm / ops.where(both, g_norm, 1.0)
        local = ops.where(both, ratio, ops.cast(self.epsilon, "float32"))
        local = ops.cast(local, variable.dtype)
        if self.mode == "clip":
            lr = ops.cast(learning_rate, variable.dtype)
            factor = ops.minimum(local / ops.maximum(lr, 1e-30), 1.0)
        else:
            factor = local
        self._momentum_step(factor * gradient, variable, learning_rate)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"eta": self.eta, "mode": self.mode, "epsilon": self.epsilon})
        return config


def exclude_normalization_and_bias(
    optimizer: keras.optimizers.Optimizer,
    model: keras.Model,
    *,
    decay_batchnorm: bool = False,
    decay_bias: bool = False,
) -> list:
    """Excludes normalization-layer variables and biases from the optimizer's weight decay.

    Must run before the optimizer is built.

    Args:
        optimizer: the optimizer to configure.
        model: the model whose trainable variables are classified.
        decay_batchnorm: keep decaying the variables of normalization layers.
        decay_bias: keep decaying biases (variables named "bias").

    Returns:
        The excluded variables.
    """
    norm_ids = {
        id(variable)
        for layer in all_layers(model, include_self=True)
        if isinstance(layer, _NORMALIZATION_LAYERS)
        for variable in layer.trainable_weights
    }
    excluded = [
        variable
        for variable in model.trainable_variables
        if (id(variable) in norm_ids and not decay_batchnorm)
        or (id(variable) not in norm_ids and not decay_bias and variable.name.endswith("bias"))
    ]
    optimizer.exclude_from_weight_decay(var_list=excluded)
    return excluded


def build_optimizer(
    config: OptimizerConfig, learning_rate, model: keras.Model | None = None
) -> MomentumSGD:
    """Builds the optimizer `config` describes.

    Args:
        config: the optimizer settings.
        learning_rate: a float or a `LearningRateSchedule`.
        model: when given, normalization layers and biases are excluded from weight decay
            as `config` says.

    Returns:
        A `MomentumSGD` or `LARS` instance (not yet built).
    """
    common = dict(
        learning_rate=learning_rate,
        momentum=config.momentum,
        nesterov=config.nesterov,
        weight_decay=config.weight_decay,
    )
    if config.name == "lars":
        optimizer = LARS(
            eta=config.larc_eta, mode=config.larc_mode, epsilon=config.larc_epsilon, **common
        )
    else:
        optimizer = MomentumSGD(**common)
    if model is not None:
        exclude_normalization_and_bias(
            optimizer,
            model,
            decay_batchnorm=config.decay_batchnorm,
            decay_bias=config.decay_bias,
        )
    return optimizer


def assemble_optimizer(
    spec: OptimizerConfig | keras.optimizers.Optimizer,
    schedule: Any,
    *,
    model: keras.Model,
    precision: str,
    config: Any,
    distribution: Any,
    global_batch: int,
    steps_per_epoch: int | None,
    epochs: int,
) -> keras.optimizers.Optimizer:
    """The Trainer's optimizer: `spec` (a config built with its schedule, or a ready one),
    wrapped in loss scaling under mixed_float16 (`config.dynamic_loss_scale`,
    `config.loss_scale` and growth steps: `precision.loss_scale_optimizer`), then given the
    distribution's gradient averaging (outermost).

    Raises:
        ValueError: a schedule in epochs without `steps_per_epoch`.
    """
    if isinstance(spec, keras.optimizers.Optimizer):
        optimizer = spec
    else:
        rate = schedule
        if isinstance(rate, ScheduleConfig):
            if steps_per_epoch is None:
                raise ValueError(
                    "the learning-rate schedule is given in epochs: pass steps_per_epoch "
                    "(the data's length is unknown)"
                )
            rate = build_schedule(
                rate, global_batch=global_batch, steps_per_epoch=steps_per_epoch, epochs=epochs
            )
        optimizer = build_optimizer(spec, rate, model)
    if precision == "mixed_float16" and not isinstance(
        optimizer, keras.optimizers.LossScaleOptimizer
    ):
        optimizer = loss_scale_optimizer(
            optimizer,
            dynamic=config.dynamic_loss_scale,
            scale=config.loss_scale,
            growth_steps=config.loss_scale_growth_steps,
        )
    return distribution.wrap_optimizer(optimizer, config.compression)


def check_optimizer_args(optimizer: Any, schedule: Any) -> tuple[Any, Any]:
    """The Trainer's `(optimizer, schedule)` arguments, checked, with their defaults.

    Raises:
        ValueError: naming the argument that is neither of the accepted kinds, or a schedule
            given with a ready optimizer.
    """
    if optimizer is None:
        optimizer = OptimizerConfig()
    if isinstance(optimizer, keras.optimizers.Optimizer):
        if schedule is not None:
            raise ValueError(
                "schedule must be None when a ready optimizer is given (its learning_rate "
                f"is used), got schedule={schedule!r}"
            )
        return optimizer, None
    if not isinstance(optimizer, OptimizerConfig):
        raise ValueError(
            f"optimizer must be an OptimizerConfig or a keras optimizer, got {optimizer!r}"
        )
    if schedule is None:
        schedule = ScheduleConfig()
    if isinstance(schedule, bool) or not isinstance(
        schedule, (ScheduleConfig, int, float, keras.optimizers.schedules.LearningRateSchedule)
    ):
        raise ValueError(
            "schedule must be a ScheduleConfig, a float or a LearningRateSchedule, "
            f"got {schedule!r}"
        )
    return optimizer, schedule
