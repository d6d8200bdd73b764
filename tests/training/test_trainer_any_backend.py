"""The single-process Trainer on NumPy data, on whichever Keras backend runs the tests.

Runs under TensorFlow with the rest of the suite and under KERAS_BACKEND=jax with
`-m backend_agnostic`; nothing here imports TensorFlow.
"""

import json
import shutil

import keras
import numpy as np
import pytest
from training_helpers import blobs, sparse_ce, tiny_mlp

from cvbench.training import OptimizerConfig, ScheduleConfig, TrainConfig, Trainer

pytestmark = pytest.mark.backend_agnostic


def make_trainer(log_dir=None, **config):
    settings = dict(log_every=4, progress_bar=False, seed=1, export=False, log_dir=log_dir)
    settings.update(config)
    return Trainer(
        tiny_mlp,
        sparse_ce(),
        OptimizerConfig(name="lars", momentum=0.9, nesterov=True, larc_eta=0.02),
        schedule=ScheduleConfig(base_lr=8.0, warmup_steps=2, decay="cosine"),
        precision="float32",
        distribution="single",
        metrics=["accuracy"],
        config=TrainConfig(**settings),
    )


def test_fit_evaluate_and_benchmark(tmp_path, capsys):
    trainer = make_trainer(str(tmp_path), burn_in_steps=2)
    x, y = blobs(64)
    trainer.fit((x, y), epochs=3, batch_size=8, validation_data=(x, y))
    result = trainer.evaluate((x, y), batch_size=16)
    assert result["accuracy"] == 1.0 and result["loss"] < 0.2
    out = capsys.readouterr().out
    assert "Images/sec:" in out and "val_accuracy" in out
    events = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "step" for e in events) == 6  # 24 steps, a line every 4
    summary = trainer.benchmark((x, y), steps=4, burn_in=1, batch_size=8, mode="inference")
    assert summary.steps == 4 and summary.mean > 0


def test_resume_from_a_checkpoint_continues_the_same_run(tmp_path):
    x, y = blobs(48)
    full = make_trainer(str(tmp_path / "full"), checkpoint_every=5, keep_checkpoints=10)
    full.fit((x, y), epochs=2, batch_size=8)  # 6 steps per epoch; checkpoints 5, 6, 10, 12
    # A run that stopped after step 5 (mid epoch 1) has only that checkpoint.
    (tmp_path / "cut" / "checkpoints").mkdir(parents=True)
    name = "ckpt-0000000005.npz"
    shutil.copy(tmp_path / "full" / "checkpoints" / name, tmp_path / "cut" / "checkpoints" / name)
    resumed = make_trainer(str(tmp_path / "cut"), resume=True, seed=99)
    resumed.fit((x, y), epochs=2, batch_size=8)
    assert resumed.state["step"] == 12
    for a, b in zip(full.model.variables, resumed.model.variables, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(a.value), keras.ops.convert_to_numpy(b.value), atol=1e-6
        )
