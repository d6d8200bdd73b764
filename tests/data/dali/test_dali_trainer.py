"""A tiny model trained through the Trainer from the DALI path, with NumPy batches and with
`jax.Array` batches from DALI's JAX plugin (on either Keras backend: under TensorFlow the
Trainer converts the JAX arrays), and a resume from a checkpoint returning to the same DALI
stream."""

import shutil

import jax
import keras
import numpy as np
import pytest
from dali_records import NUM_CLASSES, write_records

from cvbench.data.dali.dataset import imagenet_dali_dataset
from cvbench.training import OptimizerConfig, TrainConfig, Trainer

pytestmark = pytest.mark.backend_agnostic

SIZE = 16


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return write_records(tmp_path_factory.mktemp("records"))


class Recorder:
    """Passes a re-iterable through, keeping the labels of the batches taken."""

    def __init__(self, data):
        self.data, self.labels, self.jax_arrays = data, [], set()

    def __iter__(self):
        for x, y in self.data:
            self.labels += np.asarray(y).tolist()
            self.jax_arrays |= {isinstance(x, jax.Array), isinstance(y, jax.Array)}
            yield x, y


def tiny_model() -> keras.Model:
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(inputs))
    return keras.Model(inputs, keras.layers.Dense(NUM_CLASSES, dtype="float32")(x))


def trainer(log_dir=None, **config) -> Trainer:
    settings = dict(progress_bar=False, seed=1, export=False, log_dir=log_dir)
    settings.update(config)
    return Trainer(
        tiny_model,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        OptimizerConfig(name="sgd"),
        schedule=0.05,
        precision="float32",
        distribution="single",
        metrics=["accuracy"],
        config=TrainConfig(**settings),
    )


def dali(records, split, training, arrays="numpy"):
    return imagenet_dali_dataset(
        records,
        split,
        batch_size=2,
        image_size=SIZE,
        training=training,
        seed=7,
        num_threads=1,
        arrays=arrays,
    )


@pytest.mark.parametrize("arrays", ["numpy", "jax"])
def test_trainer_fits_and_evaluates_from_dali(records, arrays):
    train = Recorder(dali(records, "train", True, arrays))
    t = trainer()
    history = t.fit(
        train,
        epochs=2,
        steps_per_epoch=3,
        validation_data=dali(records, "validation", False, arrays),
    )
    assert np.isfinite(history.history["loss"]).all()
    # 6 steps of 2: 12 labels, all from the 6 training records (0-based 0..5), each at least
    # once in 12 draws of a 6-record epoch read twice.
    assert len(train.labels) >= 12 and set(train.labels) == set(range(6))
    assert train.jax_arrays == {arrays == "jax"}
    result = t.evaluate(dali(records, "validation", False, arrays))
    assert np.isfinite(result["loss"]) and 0.0 <= result["accuracy"] <= 1.0


@pytest.mark.parametrize("arrays", ["numpy", "jax"])
def test_resume_returns_to_the_same_dali_stream(records, tmp_path, arrays):
    full = trainer(str(tmp_path / "full"), checkpoint_every=2, keep_checkpoints=10)
    full.fit(dali(records, "train", True, arrays), epochs=2, steps_per_epoch=3)
    (tmp_path / "cut" / "checkpoints").mkdir(parents=True)
    name = "ckpt-0000000004.npz"  # stopped after step 4, in epoch 1
    shutil.copy(tmp_path / "full" / "checkpoints" / name, tmp_path / "cut" / "checkpoints" / name)
    resumed = trainer(str(tmp_path / "cut"), resume=True)
    resumed.fit(dali(records, "train", True, arrays), epochs=2, steps_per_epoch=3)
    assert resumed.state["step"] == 6
    for a, b in zip(full.model.variables, resumed.model.variables, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(a.value), keras.ops.convert_to_numpy(b.value), atol=1e-6
        )
