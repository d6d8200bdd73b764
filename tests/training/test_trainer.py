import json
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from training_helpers import images, sparse_ce, tiny_classifier
from training_helpers import make_trainer as helpers_make_trainer

from cvbench.training import TrainConfig, Trainer


def make_trainer(tmp_path=None, **config):
    return helpers_make_trainer(tmp_path, metrics=["accuracy"], **config)


def event_tags(directory):
    tags = set()
    for path in directory.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags.update(value.tag for value in event.summary.value)
    return tags


def test_fit_prints_logs_checkpoints_and_exports(tmp_path, capsys):
    trainer = make_trainer(
        tmp_path, log_every=2, burn_in_steps=1, checkpoint_every=3, keep_checkpoints=2, export=True
    )
    history = trainer.fit(images(32), epochs=2, batch_size=4)  # 8 steps per epoch
    out = capsys.readouterr().out.splitlines()

    assert "  Step Epoch Img/sec   Loss   LR" in out
    step_lines = [
        line for line in out if re.fullmatch(r"\s+\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+", line)
    ]
    assert [int(line.split()[0]) for line in step_lines] == [2, 4, 6, 8, 10, 12, 14, 16]
    assert [int(line.split()[1]) for line in step_lines] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert any(
        re.fullmatch(r"Images/sec: [\d.]+ \+/- [\d.]+ \(jitter = [\d.]+\)", line) for line in out
    )
    assert trainer.throughput.steps == 15  # 16 steps minus 1 burn-in
    assert len(history.history["loss"]) == 2 and "accuracy" in history.history

    events = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "throughput"
    assert kinds.count("step") == 8 and kinds.count("epoch") == 2
    step_event = next(e for e in events if e["event"] == "step")
    assert {"images_per_sec", "loss", "lr", "accuracy", "step", "epoch"} <= set(step_event)

    tags = event_tags(tmp_path / "tensorboard")
    assert {"train/loss", "train/images_per_sec", "train/learning_rate", "epoch/loss"} <= tags

    # Checkpoints at steps 3, 6, 8 (epoch end), 9, 12, 15, 16 (epoch end); the newest 2 kept.
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt-0000000015.npz", "ckpt-0000000016.npz"]

    x = images(4, seed=9)[0]
    reloaded = keras.saving.load_model(tmp_path / "export" / "model.keras")
    np.testing.assert_allclose(
        reloaded.predict(x, verbose=0), trainer.model.predict(x, verbose=0), atol=1e-6
    )
    assert (tmp_path / "export" / "keras_saved_model" / "saved_model.pb").is_file()


def test_resume_mid_epoch_matches_the_uninterrupted_run(tmp_path):
    full = make_trainer(tmp_path / "full", checkpoint_every=3, keep_checkpoints=10)
    full.fit(images(32), epochs=2, batch_size=4)
    # Pretend the run died after step 9 (epoch 2, batch 1): drop the later checkpoints.
    shutil.copytree(tmp_path / "full", tmp_path / "cut")
    for path in (tmp_path / "cut" / "checkpoints").iterdir():
        if int(path.stem.split("-")[1]) > 9:
            path.unlink()
    resumed = make_trainer(tmp_path / "cut", resume=True, seed=123)  # other initial weights
    resumed.fit(images(32), epochs=2, batch_size=4)
    assert resumed.state | {"epoch_sums": None} == {
        "step": 16,
        "epoch": 2,
        "batch_in_epoch": 0,
        "consumed": 16,
        "data_seed": 0,
        "skipped_steps": 0,
        "epoch_applied": 8,
        "epoch_skipped": 0,
        "epoch_sums": None,
    }
    # The last epoch's sums: steps 9 (checkpointed) and 10-16 (resumed), as the full run's.
    assert resumed.state["epoch_sums"] == full.state["epoch_sums"]
    for a, b in zip(full.model.variables, resumed.model.variables, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6)
    for a, b in zip(full.optimizer.variables, resumed.optimizer.variables, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6)


def test_the_loss_receives_whole_structures():
    inputs = keras.Input((3,))
    model = keras.Model(
        inputs, {"a": keras.layers.Dense(2)(inputs), "b": keras.layers.Dense(1)(inputs)}
    )

    def loss(y_true, y_pred):
        assert set(y_true) == {"a", "b"} and set(y_pred) == {"a", "b"}
        squared = keras.ops.mean(keras.ops.square(y_true["a"] - y_pred["a"]))
        return squared + 2.0 * keras.ops.mean(keras.ops.abs(y_true["b"] - y_pred["b"]))

    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 3)).astype("float32")
    y = {
        "a": rng.normal(size=(6, 2)).astype("float32"),
        "b": rng.normal(size=(6, 1)).astype("float32"),
    }
    trainer = Trainer(
        model,
        loss,
        schedule=0.1,
        precision="float32",
        distribution="single",
        config=TrainConfig(log_every=0, progress_bar=False),
    )
    p = model.predict(x, verbose=0)
    expected = np.mean((y["a"] - p["a"]) ** 2) + 2 * np.mean(np.abs(y["b"] - p["b"]))
    assert trainer.evaluate((x, y), batch_size=6)["loss"] == pytest.approx(expected, rel=1e-5)
    trainer.fit((x, y), epochs=3, batch_size=3)
    assert trainer.evaluate((x, y), batch_size=6)["loss"] < expected


def test_ordinary_keras_callbacks_and_the_model_stays_a_keras_model(tmp_path):
    seen = {}

    class StopAfterFirstEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen["optimizer"] = type(self.model.optimizer).__name__
            seen["logs"] = dict(logs)
            self.model.stop_training = True

    trainer = make_trainer()
    saver = keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras"))
    history = trainer.fit(
        images(16),
        epochs=5,
        batch_size=4,
        callbacks=[StopAfterFirstEpoch()],
        chief_callbacks=[saver],
    )
    assert len(history.history["loss"]) == 1 and trainer.state["epoch"] == 1
    assert seen["optimizer"] == "MomentumSGD" and {"loss", "accuracy"} <= set(seen["logs"])

    model = trainer.model
    assert not model.compiled  # the Trainer compiles its wrapper, not the user's model
    saved = keras.saving.load_model(tmp_path / "m.keras")
    assert saved.name == model.name
    x, y = images(8, seed=1)
    np.testing.assert_allclose(saved.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)
    model.compile(optimizer="sgd", loss=sparse_ce())
    model.fit(x, y, epochs=1, verbose=0)


def test_evaluate_counts_only_rows_with_weight():
    trainer = make_trainer()
    x, y = images(12, seed=3)
    w = np.array([1.0] * 7 + [0.0] * 5, "float32")  # the last 5 rows are padding
    predictions = trainer.model.predict(x, verbose=0).argmax(axis=1)
    expected = float(np.mean(predictions[:7] == y[:7]))
    result = trainer.evaluate((x, y, w), batch_size=5)  # batches of 5, 5, 2
    assert result["accuracy"] == pytest.approx(expected)
    batches = [(x[i : i + 5], y[i : i + 5], w[i : i + 5]) for i in range(0, 12, 5)]
    assert trainer.evaluate(batches)["accuracy"] == pytest.approx(expected)


def test_benchmark_reports_images_per_second(capsys):
    trainer = make_trainer(log_every=1)
    summary = trainer.benchmark(images(16), steps=3, burn_in=1, batch_size=4, mode="inference")
    assert (summary.steps, summary.global_batch) == (3, 4)
    assert summary.mean > 0
    trained = trainer.benchmark(images(16), steps=6, burn_in=2, batch_size=4)
    assert trained.steps == 6 and trainer.state["step"] == 0  # benchmarks leave the run state
    assert capsys.readouterr().out.count("Images/sec:") == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(model=lambda: tiny_classifier(), precision="fp8"), "precision"),
        (dict(distribution="mpi"), "distribution"),
        (dict(model=42), "keras.Model"),
        (dict(optimizer=keras.optimizers.SGD(), schedule=0.1), "schedule must be None"),
        (dict(optimizer="sgd"), "OptimizerConfig"),
        (dict(schedule="cosine"), "schedule must be"),
        (dict(config=TrainConfig(compression="fp16")), "compression"),
        (dict(model=tiny_classifier(), precision="bf16"), "dtype policies"),
    ],
)
def test_bad_trainer_arguments_raise_value_errors(kwargs, message):
    args = dict(model=tiny_classifier, precision="float32", distribution="single")
    args.update(kwargs)
    model = args.pop("model")
    with pytest.raises(ValueError, match=message):
        Trainer(model, sparse_ce(), **args)


def test_bad_fit_arguments_raise_value_errors():
    trainer = make_trainer()
    with pytest.raises(ValueError, match="epochs"):
        trainer.fit(images(8), epochs=0, batch_size=4)
    with pytest.raises(ValueError, match="re-iterable"):
        trainer.fit((b for b in [images(4)]), epochs=1)
    with pytest.raises(ValueError, match="resume=True needs a log_dir"):
        TrainConfig(resume=True)


def test_a_callback_can_stop_training_after_a_batch():
    trainer = make_trainer()
    stopper = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: setattr(
            trainer.training_model, "stop_training", batch == 2
        )
    )
    trainer.fit(images(32), epochs=2, batch_size=4, callbacks=[stopper])
    assert trainer.state["step"] == 3 and trainer.state["epoch"] == 0
    assert trainer.state["batch_in_epoch"] == 3
