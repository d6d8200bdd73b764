"""Whole-step semantics: a step whose loss or gradients are not finite changes no variable
(batch-norm moving statistics and optimizer state included), is counted as skipped, is
reported, and stays out of the epoch means."""

import doctest
import json
import math

import keras
import numpy as np
import pytest
from keras import ops
from training_helpers import images, sparse_ce, tiny_classifier, tiny_mlp

from cvbench.training import TrainConfig, Trainer, training_model

pytestmark = pytest.mark.backend_agnostic

FP16_ON_CPU = "ignore:precision mixed_float16 without a GPU"
BF16_EMULATED = "ignore:precision mixed_bfloat16 on a CPU without"


class Snapshots(keras.callbacks.Callback):
    """Every model and optimizer variable before and after each step, and each step's logs."""

    def __init__(self, trainer: Trainer) -> None:
        super().__init__()
        self.trainer = trainer
        self.before, self.after, self.logs = [], [], []

    def variables(self) -> list:
        return list(self.trainer.model.variables) + list(self.trainer.optimizer.variables)

    def values(self) -> list[np.ndarray]:
        return [np.array(ops.convert_to_numpy(v.value)) for v in self.variables()]

    def on_train_batch_begin(self, batch, logs=None):
        self.before.append(self.values())

    def on_train_batch_end(self, batch, logs=None):
        self.after.append(self.values())
        self.logs.append(dict(logs))


def make_trainer(precision, tmp_path, model=tiny_classifier, loss=None) -> Trainer:
    return Trainer(
        model,
        loss or sparse_ce(),
        schedule=0.1,
        precision=precision,
        distribution="single",
        config=TrainConfig(
            log_every=1,
            progress_bar=False,
            seed=0,
            loss_scale=1024.0,
            log_dir=str(tmp_path),
            export=False,
        ),
    )


def records(tmp_path) -> list[dict]:
    lines = (tmp_path / "train_log.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def event_tags(directory) -> set[str]:
    import tensorflow as tf

    return {
        value.tag
        for path in directory.glob("events.out.tfevents.*")
        for event in tf.compat.v1.train.summary_iterator(str(path))
        for value in event.summary.value
    }


def bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.filterwarnings(FP16_ON_CPU, BF16_EMULATED)
@pytest.mark.parametrize(
    "precision, corrupt",
    [
        # 1e6 is beyond float16's 65,504: the input cast overflows, the forward pass with it.
        ("mixed_float16", lambda rows: rows * 1e6),
        ("float32", lambda rows: np.full_like(rows, np.nan)),
        ("mixed_bfloat16", lambda rows: np.full_like(rows, np.nan)),
    ],
)
def test_a_non_finite_step_changes_no_variable_regression_nan_moving_statistics(
    precision, corrupt, tmp_path, capsys
):
    # The fault: under mixed_float16 a batch scaled by 1e6 at step 3 skipped the update but
    # wrote NaN into the moving statistics (conv1_bn/moving_mean and 39 others in ResNet-18),
    # so predictions were NaN for good, and the epoch loss was NaN.
    trainer = make_trainer(precision, tmp_path)
    x, y = images(16)
    x[8:12] = corrupt(x[8:12])  # the 3rd batch of 4 (no shuffling)
    snapshots = Snapshots(trainer)
    history = trainer.fit((x, y), epochs=1, batch_size=4, shuffle=False, callbacks=[snapshots])

    assert [logs["skipped"] for logs in snapshots.logs] == [0.0, 0.0, 1.0, 0.0]
    optimizer = trainer.optimizer
    # LossScaleOptimizer's scale and its counter change on a skipped step, on purpose.
    on_purpose = [
        v is getattr(optimizer, "dynamic_scale", None) or v is getattr(optimizer, "step_counter", 0)
        for v in snapshots.variables()
    ]
    assert sum(on_purpose) == (2 if precision == "mixed_float16" else 0)
    for variable, purpose, a, b in zip(
        snapshots.variables(), on_purpose, snapshots.before[2], snapshots.after[2], strict=True
    ):
        if not purpose:
            assert bitwise_equal(a, b), variable.path
    assert snapshots.variables()[0].path.endswith("kernel")  # the next step trains again
    assert not bitwise_equal(snapshots.before[3][0], snapshots.after[3][0])
    moving = [ops.convert_to_numpy(v.value) for v in trainer.model.non_trainable_variables]
    assert len(moving) == 2 and all(np.isfinite(m).all() for m in moving)
    assert np.isfinite(trainer.model.predict(np.delete(x, range(8, 12), 0), verbose=0)).all()
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    assert int(ops.convert_to_numpy(inner.iterations)) == 3  # applied steps only
    expected_scale = 512.0 if precision == "mixed_float16" else None  # 1024 halved once
    assert trainer.loss_scale == expected_scale

    # The epoch loss is the mean over the 3 applied steps; 1 skipped in the epoch and run.
    losses = [logs["loss"] for logs in snapshots.logs]
    assert not math.isfinite(losses[2])
    assert history.history["loss"] == [(losses[0] + losses[1] + losses[3]) / 3]
    assert "skipped" not in history.history
    assert trainer.state["skipped_steps"] == 1

    out = capsys.readouterr().out.splitlines()
    step_3 = next(line for line in out if line.split()[:2] == ["3", "1"])
    scale_text = ", loss scale now 512" if precision == "mixed_float16" else ""
    assert step_3.endswith("  skipped: loss or gradients not finite" + scale_text)
    assert not any("skipped" in line for line in out if line.split()[:2] == ["4", "1"])
    epoch_text = "  loss scale 512" if precision == "mixed_float16" else ""
    assert (
        f"epoch 1: loss {history.history['loss'][0]:.4f}  skipped 1 of 4 steps (1 in the run)"
        + epoch_text
    ) in out

    events = records(tmp_path)
    steps = [e for e in events if e["event"] == "step"]
    assert [e["skipped"] for e in steps] == [False, False, True, False]
    assert [e["skipped_steps"] for e in steps] == [0, 0, 1, 1]
    assert [e["loss_scale"] for e in steps][2:] == [expected_scale] * 2
    [epoch] = [e for e in events if e["event"] == "epoch"]
    assert (epoch["skipped"], epoch["skipped_steps"], epoch["loss_scale"]) == (
        1,
        1,
        expected_scale,
    )
    assert epoch["loss"] == history.history["loss"][0]
    if keras.config.backend() == "tensorflow":
        tags = event_tags(tmp_path / "tensorboard")
        assert {"train/skipped_steps", "epoch/skipped", "epoch/skipped_steps"} <= tags
        assert ("epoch/loss_scale" in tags) == (precision == "mixed_float16")


def test_a_non_finite_loss_with_finite_gradients_is_skipped_too(tmp_path):
    # The loss adds mean(y), which no variable's gradient sees: an infinite label makes the
    # loss infinite with finite gradients. One gradient is turned into NaN, so the step (and
    # under Horovod every rank's) is skipped.
    def loss(y_true, y_pred):
        return ops.mean(ops.square(y_pred)) + ops.mean(y_true)

    trainer = make_trainer("float32", tmp_path, model=tiny_mlp, loss=loss)
    x = np.ones((8, 4), "float32")
    y = np.zeros((8,), "float32")
    y[4] = np.inf
    snapshots = Snapshots(trainer)
    history = trainer.fit((x, y), epochs=1, batch_size=4, shuffle=False, callbacks=[snapshots])
    assert [logs["skipped"] for logs in snapshots.logs] == [0.0, 1.0]
    assert snapshots.logs[1]["loss"] == math.inf
    for a, b in zip(snapshots.before[1], snapshots.after[1], strict=True):
        assert bitwise_equal(a, b)
    assert history.history["loss"] == [snapshots.logs[0]["loss"]]


def test_an_epoch_of_skipped_steps_has_nan_means_and_keeps_the_model(tmp_path, capsys):
    trainer = make_trainer("float32", tmp_path)
    x, y = images(8)
    x[:] = np.nan
    snapshots = Snapshots(trainer)
    history = trainer.fit((x, y), epochs=1, batch_size=4, callbacks=[snapshots])
    assert math.isnan(history.history["loss"][0])  # a mean over no applied step
    assert trainer.state["skipped_steps"] == 2
    for a, b in zip(snapshots.before[0], snapshots.after[1], strict=True):
        assert bitwise_equal(a, b)
    assert "epoch 1: loss nan  skipped 2 of 2 steps (2 in the run)" in capsys.readouterr().out


def test_a_skipped_first_step_with_metrics_keeps_the_model(tmp_path):
    # Regression: the metrics' variables are made while the first step's graph is traced, so
    # the variables a skipped step puts back are the ones of that trace (the first run of
    # `cvbench train --precision fp16`, whose first step overflows, failed on TensorFlow).
    trainer = make_trainer("float32", tmp_path)
    trainer.metrics = ["accuracy"]
    x, y = images(8)
    x[:4] = np.nan
    snapshots = Snapshots(trainer)
    trainer.fit((x, y), epochs=1, batch_size=4, shuffle=False, callbacks=[snapshots])
    assert [logs["skipped"] for logs in snapshots.logs] == [1.0, 0.0]
    for a, b in zip(snapshots.before[0], snapshots.after[0], strict=True):
        assert bitwise_equal(a, b)
    assert not all(
        bitwise_equal(a, b) for a, b in zip(snapshots.before[1], snapshots.after[1], strict=True)
    )


def test_keras_fit_of_the_training_model_runs_one_step_per_batch():
    # Keras' own fit calls the train function once per step with the same dataset iterator:
    # it must take one batch per call, not the whole iterator.
    inputs = keras.Input((4,))
    inner = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    model = training_model.TrainingModel(inner, sparse_ce())
    model.compile(optimizer="sgd")
    x, y = np.ones((12, 4), "float32"), np.zeros((12,), "int32")
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    assert int(ops.convert_to_numpy(model.optimizer.iterations)) == 6  # 2 epochs x 3 batches
    assert len(history.history["loss"]) == 2


def test_the_training_model_docstring_example():
    result = doctest.testmod(training_model, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
