"""Evaluation data of infinite `tf.data` cardinality (a training pipeline) is refused before
any step instead of running forever (probe P52, F3)."""

import pytest
import tensorflow as tf
from training_helpers import blobs, sparse_ce

from cvbench.training import TrainConfig, Trainer


def tiny_trainer() -> Trainer:
    import keras

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(inputs))
    config = TrainConfig(log_every=0, progress_bar=False, export=False, seed=0)
    return Trainer(model, sparse_ce(), None, schedule=0.1, precision="float32",
                   distribution="single", config=config)  # fmt: skip


@pytest.mark.timeout(120)
def test_a_repeating_tf_dataset_is_refused_unless_steps_are_given():
    x, y = blobs(8)
    endless = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
    assert int(endless.cardinality()) == tf.data.INFINITE_CARDINALITY
    trainer = tiny_trainer()
    with pytest.raises(ValueError, match=r"repeats forever .*dataset.take\(n\).* or steps=N"):
        trainer.evaluate(endless)
    with pytest.raises(ValueError, match="repeats forever.* or validation_steps=N"):
        trainer.fit((x, y), epochs=1, batch_size=4, validation_data=endless)
    assert trainer.state["step"] == 0
    assert set(trainer.evaluate(endless, steps=3)) == {"loss"}
    assert set(trainer.evaluate(endless.take(2))) == {"loss"}
