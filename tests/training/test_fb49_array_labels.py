"""Array labels outside the model's classes are refused on the host before a step (probe fb49
#3): under JAX, `Trainer.fit((x, y + 5))` trained to a loss of 0.0000 (a label out of range
one-hot encodes to zeros); under TensorFlow it ended in a graph error with the node dump. The
loss cannot check inside a step (XLA and JAX drop assertions), and array data has no input
pipeline: the Trainer checks through the loss's host-side hook
(`cvbench.training.losses.check_loss_targets`)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from training_helpers import images, make_trainer, tiny_classifier

from cvbench.training import OptimizerConfig, TrainConfig, Trainer
from cvbench.training.inputs import check_array_targets
from cvbench.training.losses import SparseCrossEntropy, check_loss_targets, check_sparse_labels

pytestmark = pytest.mark.backend_agnostic

C = 3  # tiny_classifier's outputs


def _labels(bad: int, row: int, n: int = 8) -> np.ndarray:
    y = np.arange(n, dtype="int32") % C
    y[row] = bad
    return y


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize(("bad", "row"), [(-1, 0), (C, 5)])
def test_fit_refuses_labels_outside_the_classes_before_a_step(bad, row, batch_size):
    x, _ = images(8, C)
    trainer = make_trainer(None)
    with pytest.raises(ValueError) as caught:
        trainer.fit((x, _labels(bad, row)), epochs=1, batch_size=batch_size)
    expected = f"label {bad} of row {row} is outside [0, 3) (the model's 3 outputs)"
    assert str(caught.value) == expected
    assert trainer.train_state.step == 0


@pytest.mark.parametrize("batch_size", [1, 4])
def test_the_probe_labels_plus_five_name_the_first_row(batch_size):
    x, y = images(16, C)  # row 0's label + 5 is the first label >= 3: every label + 5 is
    trainer = make_trainer(None)
    with pytest.raises(ValueError, match=rf"^label {y[0] + 5} of row 0 is outside \[0, 3\)"):
        trainer.fit((x, y + 5), epochs=1, batch_size=batch_size)


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize(("bad", "row"), [(-1, 2), (C, 7)])
def test_evaluate_and_validation_refuse_them(bad, row, batch_size):
    x, y = images(8, C)
    trainer = make_trainer(None)
    with pytest.raises(ValueError, match=rf"^label {bad} of row {row} is outside \[0, 3\)"):
        trainer.evaluate((x, _labels(bad, row)), batch_size=batch_size)
    with pytest.raises(ValueError, match=rf"^label {bad} of row {row} is outside \[0, 3\)"):
        trainer.fit((x, y), validation_data=(x, _labels(bad, row)), batch_size=batch_size)
    assert trainer.train_state.step == 0  # refused before training an epoch


@pytest.mark.parametrize("batch_size", [1, 4])
def test_labels_in_range_still_train_and_evaluate(batch_size):
    x, y = images(8, C)
    y[:2] = [0, C - 1]  # both ends of [0, C)
    trainer = make_trainer(None)
    history = trainer.fit((x, y[:, None]), epochs=1, batch_size=batch_size)  # [rows, 1] too
    assert trainer.train_state.step == 8 // batch_size
    assert history.history["loss"][0] > 0.0 and np.isfinite(history.history["loss"][0])
    assert set(trainer.evaluate((x, y), batch_size=batch_size)) >= {"loss"}


@pytest.mark.parametrize("batch_size", [1, 4])
def test_the_task_loss_checks_through_its_hook(batch_size):
    x, _ = images(8, C)
    trainer = Trainer(
        tiny_classifier,
        SparseCrossEntropy(label_smoothing=0.1),
        OptimizerConfig(),
        precision="float32",
        distribution="single",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    with pytest.raises(ValueError, match=r"^label 3 of row 4 is outside \[0, 3\)"):
        trainer.fit((x, _labels(C, 4)), batch_size=batch_size)
    soft = np.full((8, C), 1.0 / C, "float32")  # mixup-like soft labels: not class indices
    trainer.fit((x, soft), batch_size=batch_size)
    assert trainer.train_state.step == 8 // batch_size


def test_float_labels_must_be_whole_and_finite():
    check_sparse_labels(np.array([0.0, 2.0]), 3)  # whole floats are classes
    with pytest.raises(ValueError, match=r"^label 1.5 of row 1 is not an integer class$"):
        check_sparse_labels(np.array([0.0, 1.5]), 3)  # was cast to class 1
    with pytest.raises(ValueError, match=r"^label nan of row 0 is not an integer class$"):
        check_sparse_labels(np.array([np.nan, 1.0]), 3)
    with pytest.raises(ValueError, match=r"^label 3 of row 0 is outside \[0, 3\)"):
        check_sparse_labels(np.array([3.0]), 3)
    with pytest.raises(ValueError, match="^integer labels must be numbers, one row per"):
        check_sparse_labels(np.array([["a"]]), 3)
    with pytest.raises(ValueError, match="^integer labels must be numbers, one row per"):
        check_sparse_labels(np.array(1), 3)


def test_labels_of_more_dimensions_name_their_row():
    per_pixel = np.zeros((3, 2, 2), "int32")  # Keras' SparseCategoricalCrossentropy takes these
    check_sparse_labels(per_pixel, 3)
    per_pixel[2, 1, 0] = 5  # row 2 is the first with a bad label
    with pytest.raises(ValueError, match=r"^label 5 of row 2 is outside \[0, 3\)"):
        check_sparse_labels(per_pixel, 3)


def test_keras_ignore_class_is_allowed_and_other_losses_are_not_checked():
    ignoring = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1)
    check_loss_targets(ignoring, np.array([0, -1, 2]), 3)  # -1 is ignored, not a class
    with pytest.raises(ValueError, match=r"^label -2 of row 0"):
        check_loss_targets(ignoring, np.array([-2, -1]), 3)
    check_loss_targets(keras.losses.MeanSquaredError(), np.array([7.5]), 3)  # no rule: no check


def test_soft_labels_of_the_wrong_width_are_named():
    with pytest.raises(ValueError, match=r"^soft labels must have the logits' 3 classes"):
        SparseCrossEntropy().check_targets(np.zeros((4, 2)), 3)


def test_only_array_data_with_one_known_output_is_checked():
    model, loss = tiny_classifier(C), keras.losses.SparseCategoricalCrossentropy()
    x, _ = images(4, C)
    check_array_targets([(x, np.full(4, 9))], loss, model)  # batches: their pipeline checks
    with pytest.raises(ValueError, match=r"^label 9 of row 0"):
        check_array_targets((x, np.full(4, 9)), loss, model)

    class Subclassed(keras.Model):  # no `outputs`: the width comes from its output spec
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, inputs):
            return self.dense(keras.ops.mean(inputs, axis=(1, 2)))

    with pytest.raises(ValueError, match=r"^label 2 of row 3 is outside \[0, 2\)"):
        check_array_targets((x, np.array([0, 1, 1, 2])), loss, Subclassed())
