"""P52 F9: an integer label outside the model's classes in data that is not checked on the
host (a tf.data dataset, any re-iterable of batches) is never scored as a fit:
`SparseCrossEntropy` gives its row a NaN loss (it one-hot encoded it to zeros, a loss of 0),
so the Trainer's whole-step check skips the step and says so, an evaluation's loss is NaN
(the classification task warns why), and top-k accuracy never counts the row right.

Runs under TensorFlow with the suite and under KERAS_BACKEND=jax with `-m backend_agnostic`.
"""

import math

import keras
import numpy as np
import pytest

from cvbench.tasks.classification import top_k_accuracy, warn_nonfinite_outputs
from cvbench.training import TrainConfig, Trainer
from cvbench.training.losses import SparseCrossEntropy

pytestmark = pytest.mark.backend_agnostic

# Logits log(1), log(2), log(5): softmax (1/8, 2/8, 5/8), so the cross-entropy of label k is
# -log p_k: label 0 -> log 8, label 2 -> log(8/5).
LOGITS = np.log(np.array([[1.0, 2.0, 5.0]] * 4, "float32"))
LABELS = np.array([0, 2, 3, 7], "int32")
NLL = [math.log(8.0), math.log(4.0), math.log(8.0 / 5.0)]


def per_row(loss):
    return keras.ops.convert_to_numpy(loss.call(keras.ops.convert_to_tensor(LABELS), LOGITS))


def test_labels_outside_the_classes_score_nan_not_zero():
    rows = per_row(SparseCrossEntropy())
    np.testing.assert_allclose(rows[:2], [NLL[0], NLL[2]], rtol=1e-6)
    assert np.isnan(rows[2]) and np.isnan(rows[3])  # were 0.0: a perfect fit
    assert math.isnan(float(SparseCrossEntropy()(LABELS, LOGITS)))  # the batch mean too


def test_label_smoothing_keeps_the_valid_rows_and_nan_for_the_others():
    # target (1 - s) * onehot + s / 3: loss (1 - s) * nll_label + s * mean(nll)
    s = 0.1
    rows = per_row(SparseCrossEntropy(label_smoothing=s))
    mean = sum(NLL) / 3
    expected = [(1 - s) * NLL[0] + s * mean, (1 - s) * NLL[2] + s * mean]
    np.testing.assert_allclose(rows[:2], expected, rtol=1e-6)
    assert np.isnan(rows[2]) and np.isnan(rows[3])  # were s * mean(nll) = 0.1741...


def test_label_shapes_soft_labels_and_jit_unchanged():
    loss = SparseCrossEntropy()
    column = keras.ops.convert_to_numpy(loss.call(LABELS[:2, None], LOGITS[:2]))
    np.testing.assert_allclose(column, [NLL[0], NLL[2]], rtol=1e-6)  # [batch, 1] labels
    soft = np.array([[0.5, 0.0, 0.5]], "float32")  # soft labels never NaN
    value = float(loss(soft, LOGITS[:1]))
    assert value == pytest.approx(0.5 * NLL[0] + 0.5 * NLL[2], rel=1e-6)
    negative = keras.ops.convert_to_numpy(loss.call(np.array([-1, 1]), LOGITS[:2]))
    assert np.isnan(negative[0]) and negative[1] == pytest.approx(NLL[1], rel=1e-6)


def test_top_k_accuracy_never_counts_an_out_of_range_label():
    logits = np.array([[0.0, 0.0, 9.0, 0, 0, 0]] * 3, "float32")  # 6 classes, arg max 2
    for k in (1, 5):
        metric = top_k_accuracy(k, "acc")
        metric.update_state(np.array([2, 6, -1]), logits)
        assert float(metric.result()) == pytest.approx(1 / 3)  # only the label-2 row


def test_warning_names_labels_for_a_nan_evaluation_loss():
    with pytest.warns(UserWarning, match=r"label outside \[0, classes\)"):
        warn_nonfinite_outputs([top_k_accuracy(1, "top1")], loss=float("nan"))


def tiny(classes=3):
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(classes, dtype="float32")(inputs))


def test_trainer_skips_and_reports_steps_with_a_label_outside_the_classes(capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype("float32")
    y = np.array([0, 1, 2, 0, 1, 2, 7, 0], "int32")  # the second batch has label 7
    batches = [(x[:4], y[:4]), (x[4:], y[4:])]  # a re-iterable: nothing checks it on the host
    trainer = Trainer(
        tiny, SparseCrossEntropy(), None, schedule=0.1, precision="float32",
        distribution="single", metrics=[top_k_accuracy(1, "top1")],
        config=TrainConfig(log_every=1, progress_bar=False, export=False, seed=0),
    )  # fmt: skip
    trainer.fit(batches, epochs=1)
    out = capsys.readouterr().out
    assert "skipped: loss or gradients not finite" in out
    assert "skipped 1 of 2 steps" in out
    assert trainer.state["skipped_steps"] == 1
    results = trainer.evaluate(batches)
    assert math.isnan(results["loss"])  # was 0.0 with every label bad: a perfect fit
    assert results["top1"] <= 7 / 8  # the label-7 row is never right
