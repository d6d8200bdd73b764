"""Tiny models and data for the training tests (a few layers, 8x8 images); not collected."""

import keras
import numpy as np


def tiny_classifier(classes: int = 3, batchnorm: bool = True) -> keras.Model:
    """Conv (+ BatchNorm) + dense logits in float32, on 8x8x3 images."""
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", use_bias=not batchnorm)(inputs)
    if batchnorm:
        x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes, dtype="float32")(x))


def tiny_mlp(classes: int = 2) -> keras.Model:
    inputs = keras.Input((4,))
    x = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(classes, dtype="float32")(x))


def blobs(n: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two well separated classes in 4-D: class k centred at (2k - 1) * 2 on every axis."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype("int32")
    x = (rng.normal(size=(n, 4)) * 0.5 + (2.0 * y[:, None] - 1.0) * 2.0).astype("float32")
    return x, y


def images(n: int = 32, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(n, 8, 8, 3)).astype("float32"),
        rng.integers(0, classes, n).astype("int32"),
    )


def sparse_ce() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_trainer(log_dir=None, *, metrics=(), **config):
    """The tests' small Trainer: `tiny_classifier`, SGD with momentum and weight decay, a
    2-step warmup, float32, one process; `config` overrides the quiet defaults."""
    from cvbench.training import OptimizerConfig, ScheduleConfig, TrainConfig, Trainer

    settings = dict(log_every=0, progress_bar=False, seed=0, export=False)
    settings.update(config)
    if log_dir is not None:
        settings["log_dir"] = str(log_dir)
    return Trainer(
        tiny_classifier,
        sparse_ce(),
        OptimizerConfig(momentum=0.9, weight_decay=1e-4),
        schedule=ScheduleConfig(base_lr=0.5, warmup_steps=2),
        precision="float32",
        distribution="single",
        metrics=list(metrics),
        config=TrainConfig(**settings),
    )


def plain_trainer(log_dir, build=tiny_mlp, **config):
    """A Trainer of `build` (default `tiny_mlp`): sparse cross-entropy, Keras' default
    optimizer at a constant 0.1, float32, one process, quiet, seed 0, no export; `config`
    adds TrainConfig fields (e.g. `resume=True`)."""
    from cvbench.training import TrainConfig, Trainer

    return Trainer(
        build, sparse_ce(), None, schedule=0.1, precision="float32", distribution="single",
        config=TrainConfig(log_dir=str(log_dir), log_every=0, progress_bar=False, export=False,
                           seed=0, **config),
    )  # fmt: skip


def run_two_ranks(worker, out, *, timeout: int = 400, extra_path=None):
    """Runs the script `worker --out OUT` as 2 Horovod ranks on localhost (`horovodrun
    --gloo`, TensorFlow backend, the repository and `extra_path` importable); returns the
    finished `subprocess.CompletedProcess` (stdout and stderr as text)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    paths = [str(Path(__file__).parents[2]), *([str(extra_path)] if extra_path else [])]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    horovodrun = Path(sys.executable).with_name("horovodrun")
    command = [str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]
    return subprocess.run(
        [*command, str(worker), "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=timeout,
    )  # fmt: skip
