"""The evaluation loss over padded batches is the mean over the real examples only
(regression: 12 images gave a loss of 1.566 at batch 4, 1.175 at batch 8 and 0.073 at
batch 256: Keras' loss tracker weighs each batch by all its rows, padding included, and the
"sum_over_batch_size" reduction divides by them too)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from training_helpers import sparse_ce, tiny_mlp

from cvbench.training import OptimizerConfig, TrainConfig, Trainer

pytestmark = pytest.mark.backend_agnostic

NUM_IMAGES = 12


def trainer() -> Trainer:
    keras.utils.set_random_seed(0)
    return Trainer(
        tiny_mlp,
        sparse_ce(),
        OptimizerConfig(name="sgd"),
        precision="float32",
        distribution="single",
        metrics=["accuracy"],
        config=TrainConfig(progress_bar=False, export=False, seed=1),
    )


def examples() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.normal(size=(NUM_IMAGES, 4)).astype("float32"), rng.integers(0, 2, NUM_IMAGES)


def padded_batches(x, y, batch_size: int) -> list[tuple]:
    """`(x, y, w)` batches of `batch_size` rows as the evaluation pipelines make them: the
    last one padded to full size with weight-0 rows (here far-off inputs of the wrong label,
    so counting them anywhere would move the loss)."""
    batches = []
    for start in range(0, len(x), batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        pad = batch_size - len(xb)
        weights = np.concatenate([np.ones(len(xb)), np.zeros(pad)]).astype("float32")
        xb = np.concatenate([xb, np.full((pad, 4), 50.0, "float32")])
        yb = np.concatenate([yb, 1 - yb[:1].repeat(pad)]).astype("int32")
        batches.append((xb, yb, weights))
    return batches


def reference_loss(model, x, y) -> float:
    """The mean cross-entropy of the real examples, computed directly from the logits."""
    logits = keras.ops.convert_to_numpy(model(x, training=False)).astype("float64")
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(y)), y].mean())


@pytest.mark.parametrize("batch_size", [4, 5, 8, 256])
def test_the_loss_is_the_mean_over_real_examples_at_every_batch_size(batch_size):
    # 12 images: batch 4 has no padding; 5 pads 3; 8 pads 4; 256 pads 244.
    t = trainer()
    x, y = examples()
    result = t.evaluate(padded_batches(x, y, batch_size))
    assert result["loss"] == pytest.approx(reference_loss(t.model, x, y), abs=1e-6)
    logits = keras.ops.convert_to_numpy(t.model(x, training=False))
    assert result["accuracy"] == pytest.approx(float((logits.argmax(1) == y).mean()), abs=1e-6)


def test_a_batch_of_padding_only_adds_nothing():
    t = trainer()
    x, y = examples()
    batches = padded_batches(x, y, 4)
    empty = (np.full((4, 4), 50.0, "float32"), np.ones(4, "int32"), np.zeros(4, "float32"))
    result = t.evaluate(batches + [empty])
    assert result["loss"] == pytest.approx(reference_loss(t.model, x, y), abs=1e-6)


def test_without_weights_every_row_counts():
    t = trainer()
    x, y = examples()
    batches = [(x[i : i + 5], y[i : i + 5].astype("int32")) for i in range(0, NUM_IMAGES, 5)]
    result = t.evaluate(batches)  # batches of 5, 5, 2: weighed by their rows
    assert result["loss"] == pytest.approx(reference_loss(t.model, x, y), abs=1e-6)
