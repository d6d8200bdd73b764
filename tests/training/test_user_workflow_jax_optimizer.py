"""A user's own ready Keras optimizer, metric and callback on the JAX multi-device Trainer
(#39 item 2): `Trainer(..., keras.optimizers.Adam(1e-3))` on 2 devices crashed with
"Received incompatible devices for jitted computation" (`adam/iteration`, made before the
Trainer, lived on device 0 only).

`JAX_NUM_CPU_DEVICES` must be set before JAX starts: each device count runs in a process of
its own (this file, run as a script), which trains the same seeded model on the same batches
(no shuffle) once over all its devices (`distribution="auto"`) and once on one device
(`"single"`), with an optimizer, a metric and a callback all made before the Trainer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from cvbench.training import TrainConfig, Trainer

HERE = Path(__file__)
ROOT = HERE.parent.parent.parent
OPTIMIZERS = {
    "adam": lambda: keras.optimizers.Adam(1e-3),
    "sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
}


def build() -> keras.Model:
    """A model without batch normalization: 1 device and N devices compute the same mean
    gradient over the same 8 rows (batch norm would too on JAX, whose statistics are the
    global batch's, but this keeps the comparison to the optimizer)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3, dtype="float32")(hidden))


class CountAndHalve(keras.callbacks.Callback):
    """A user callback: counts batches and halves the learning rate after each epoch (it
    assigns to the optimizer's learning-rate variable, which the Trainer laid out)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.batches += 1

    def on_epoch_end(self, epoch, logs=None) -> None:
        optimizer = self.model.optimizer
        optimizer.learning_rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate)) / 2


def train(kind: str, distribution: str) -> dict:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = rng.integers(0, 3, 32).astype("int32")
    optimizer, callback = OPTIMIZERS[kind](), CountAndHalve()
    metric = keras.metrics.SparseCategoricalAccuracy()
    trainer = Trainer(
        build,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer,
        precision="float32",
        distribution=distribution,
        metrics=[metric],
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    history = trainer.fit((x, y), epochs=2, batch_size=8, shuffle=False, callbacks=[callback])
    return {
        "distribution": trainer.distribution.name,
        "devices": getattr(trainer.distribution, "num_devices", 1),
        "weights": [w.tolist() for w in trainer.model.get_weights()],
        "batches": callback.batches,
        "learning_rate": float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
        "iterations": int(keras.ops.convert_to_numpy(optimizer.iterations)),
        "accuracy": history.history["sparse_categorical_accuracy"],
    }


def relative_l2(a: list, b: list) -> float:
    a = np.concatenate([np.ravel(w) for w in a])
    b = np.concatenate([np.ravel(w) for w in b])
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run_devices(devices: int) -> dict:
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        JAX_NUM_CPU_DEVICES=str(devices),
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=str(ROOT),
    )
    run = subprocess.run(
        [sys.executable, str(HERE)], capture_output=True, text=True, env=env, timeout=500
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.slow
@pytest.mark.parametrize("devices", [2, 4])
def test_ready_keras_optimizers_metric_and_callback_train_on_jax_devices_as_on_one(devices):
    results = run_devices(devices)
    for kind in OPTIMIZERS:
        many, one = results[kind]["many"], results[kind]["one"]
        assert many["distribution"] == "jax" and many["devices"] == devices
        assert one["distribution"] == "single"
        # 32 rows / 8 per step = 4 steps an epoch, 2 epochs: the callback saw 8 batches, the
        # optimizer counted 8 iterations, and halved twice the rate is a quarter of it.
        rate = {"adam": 1e-3, "sgd": 0.1}[kind]
        for result in (many, one):
            assert result["batches"] == 8 and result["iterations"] == 8
            assert result["learning_rate"] == pytest.approx(rate / 4)
        # Trained (the weights moved from the seeded start)...
        start = [w.tolist() for w in build().get_weights()]
        assert relative_l2(many["weights"], start) > 1e-3
        # ...exactly as one device on the same 8 rows a step (float32 noise: the mean over
        # the devices' rows is summed in another order).
        assert relative_l2(many["weights"], one["weights"]) < 1e-6
        assert many["accuracy"] == one["accuracy"]


@pytest.mark.backend_agnostic
def test_a_ready_optimizer_built_for_another_model_is_refused_naming_it():
    optimizer = keras.optimizers.Adam(1e-3, name="my_adam")
    other = build()
    optimizer.build(other.trainable_variables)
    trainer = Trainer(
        build,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer,
        precision="float32",
        distribution="single",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    x, y = np.ones((8, 4), "float32"), np.zeros((8,), "int32")
    with pytest.raises(ValueError, match="optimizer 'my_adam' was already built for another"):
        trainer.fit((x, y), epochs=1, batch_size=8)


@pytest.mark.backend_agnostic
def test_a_ready_optimizer_already_built_for_this_model_is_kept():
    model = build()
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    trainer = Trainer(
        model,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer,
        precision="float32",
        distribution="single",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    x, y = np.ones((8, 4), "float32"), np.zeros((8,), "int32")
    trainer.fit((x, y), epochs=1, batch_size=8)
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 1


if __name__ == "__main__":
    results = {k: {"many": train(k, "auto"), "one": train(k, "single")} for k in OPTIMIZERS}
    print("RESULT " + json.dumps(results), flush=True)
