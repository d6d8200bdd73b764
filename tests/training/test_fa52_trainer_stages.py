"""A Trainer's fit after a layer's `trainable` changed, evaluation data that repeats forever,
and `TrainConfig`'s `log_dir` / `seed` checks (probe P52: F1, F3, F4, F5, F11).

Runs under TensorFlow with the rest of the suite and under KERAS_BACKEND=jax with
`-m backend_agnostic`; nothing here imports TensorFlow.
"""

import sys

import keras
import numpy as np
import pytest
from training_helpers import blobs, sparse_ce

from cvbench.training import TrainConfig, Trainer
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic


def two_layers() -> keras.Model:
    inputs = keras.Input((4,))
    x = keras.layers.Dense(3, activation="relu", name="body")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, dtype="float32", name="head")(x))


def trainer_of(model: keras.Model, log_dir=None) -> Trainer:
    config = TrainConfig(log_dir=log_dir, log_every=0, progress_bar=False, export=False, seed=0)
    return Trainer(model, sparse_ce(), None, schedule=0.1, precision="float32",
                   distribution="single", config=config)  # fmt: skip


def values(model: keras.Model) -> dict[str, np.ndarray]:
    return {v.path: keras.ops.convert_to_numpy(v).copy() for v in model.variables}


def changed(before: dict, model: keras.Model) -> list[str]:
    after = values(model)
    return sorted(p for p in before if not np.array_equal(before[p], after[p]))


def test_unfreezing_after_a_fit_is_refused_naming_the_variables(tmp_path):
    model = two_layers()
    model.get_layer("body").trainable = False
    trainer = trainer_of(model, str(tmp_path / "run"))
    data = blobs(16)
    trainer.fit(data, epochs=1, batch_size=8)
    model.get_layer("body").trainable = True
    before = values(model)
    with pytest.raises(ValueError) as error:
        trainer.fit(data, epochs=2, batch_size=8)
    message = str(error.value)
    assert "changed since this Trainer built its optimizer for 2 of them" in message
    assert "2 variables (body/kernel, body/bias) made trainable" in message
    assert "make a new Trainer" in message
    assert changed(before, model) == [] and trainer.state["step"] == 2  # no step ran


def test_freezing_after_a_fit_is_refused_naming_the_variables():
    model = two_layers()
    trainer = trainer_of(model)
    data = blobs(16)
    trainer.fit(data, epochs=1, batch_size=8)
    model.get_layer("body").trainable = False
    before = values(model)
    with pytest.raises(ValueError, match=r"2 variables \(body/kernel, body/bias\) made non-"):
        trainer.fit(data, epochs=2, batch_size=8)
    with pytest.raises(ValueError, match="made non-trainable"):  # the benchmark's steps too
        trainer.benchmark(data, steps=1, burn_in=0, batch_size=8)
    assert changed(before, model) == []
    model.get_layer("body").trainable = True  # back to the set it was built for: trains on
    trainer.fit(data, epochs=2, batch_size=8)
    assert trainer.state["step"] == 4
    assert changed(before, model) == ["body/bias", "body/kernel", "head/bias", "head/kernel"]


def test_a_second_stage_trains_with_a_new_trainer(tmp_path):
    model = two_layers()
    model.get_layer("body").trainable = False
    data = blobs(16)
    before = values(model)
    trainer_of(model, str(tmp_path / "head")).fit(data, epochs=1, batch_size=8)
    assert changed(before, model) == ["head/bias", "head/kernel"]
    model.get_layer("body").trainable = True
    before = values(model)
    stage2 = trainer_of(model, str(tmp_path / "all"))
    stage2.fit(data, epochs=1, batch_size=8)
    assert changed(before, model) == ["body/bias", "body/kernel", "head/bias", "head/kernel"]
    assert stage2.state["step"] == 2


class Endless:
    """Batches without end whose `len` says so (grain's `MapDataset.repeat()`)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return sys.maxsize

    def __iter__(self):
        while True:
            yield self.x, self.y


@pytest.mark.timeout(120)
def test_evaluation_data_that_repeats_forever_is_refused_before_any_step():
    model = two_layers()
    trainer = trainer_of(model)
    x, y = blobs(8)
    endless = Endless(x, y)
    with pytest.raises(ValueError, match="repeats forever.*or steps=N"):
        trainer.evaluate(endless)
    with pytest.raises(ValueError, match="repeats forever.*or validation_steps=N"):
        trainer.fit((x, y), epochs=1, batch_size=8, validation_data=endless)
    assert trainer.state["step"] == 0
    assert set(trainer.evaluate(endless, steps=2)) == {"loss"}  # a step count ends it


def test_train_config_refuses_an_empty_log_dir_and_seeds_out_of_range():
    for empty in ("", "  "):
        with pytest.raises(ValueError, match=rf"TrainConfig.log_dir is empty \({empty!r}\)"):
            TrainConfig(log_dir=empty)
    for seed in (-1, 2**32, 2**40, True, 1.5, "1"):
        with pytest.raises(ValueError, match=rf"TrainConfig.seed .* 0 to 4294967295.*{seed!r}"):
            TrainConfig(seed=seed)
    assert TrainConfig(seed=2**32 - 1).seed == 4294967295
    assert TrainConfig(seed=np.int64(0), log_dir=".").seed == 0


def test_load_weights_of_a_keras_model_file_says_what_it_is(tmp_path):
    model = two_layers()
    path = tmp_path / "model.keras"
    model.save(path)
    with pytest.raises(BadFileError, match="it is a Keras model file .*keras.saving.load_model"):
        trainer_of(two_layers()).load_weights(path)
