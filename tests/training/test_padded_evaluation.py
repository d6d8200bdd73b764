"""Regression: evaluation rows padded with weight 0 (an evaluation shard's last batch) must
not pull the loss down. Found by tests/multihost: 4 ranks evaluating 10 records in batches of 2
pad them to 16 rows, and the loss came out 10/16 of the one-process loss."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.training import TrainConfig, Trainer


def test_padding_rows_of_weight_zero_leave_the_evaluation_loss_unchanged():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 3)).astype("float32")
    y = rng.integers(0, 4, 10).astype("int32")

    def build():
        inputs = keras.Input((3,))
        return keras.Model(inputs, keras.layers.Dense(4)(inputs))

    trainer = Trainer(
        build,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        schedule=0.1,
        distribution="single",
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="top1")],
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    plain = trainer.evaluate((x, y), batch_size=2)
    # The loss by hand: the mean over the 10 rows of -log softmax(logits)[label].
    logits = keras.ops.convert_to_numpy(trainer.model(x)).astype("float64")
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -log_softmax[np.arange(10), y].mean()
    assert plain["loss"] == pytest.approx(expected, rel=1e-6)
    # The same rows in batches of 4 with 6 padding rows of weight 0 (2 full batches, one of
    # 2 real + 2 padding, one of 4 padding): the same loss and top-1.
    xp = np.concatenate([x, np.zeros((6, 3), "float32")])
    yp = np.concatenate([y, np.zeros(6, "int32")])
    wp = np.concatenate([np.ones(10, "float32"), np.zeros(6, "float32")])
    padded = trainer.evaluate((xp, yp, wp), batch_size=4)
    assert padded["loss"] == pytest.approx(expected, rel=1e-6)
    assert padded["top1"] == pytest.approx(plain["top1"], abs=1e-7)
