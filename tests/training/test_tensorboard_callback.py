"""`keras.callbacks.TensorBoard` passed to the Trainer runs and writes its event files.

Regression: with a default install it raised `TBNotInstalledError` (TensorFlow 2.20+ no longer
depends on the tensorboard package, whose `tf.summary.scalar` the callback calls).
"""

import keras
import tensorflow as tf
from training_helpers import images, sparse_ce, tiny_classifier

from cvbench.training import OptimizerConfig, TrainConfig, Trainer


def test_keras_tensorboard_callback_writes_events(tmp_path):
    trainer = Trainer(
        tiny_classifier,
        sparse_ce(),
        OptimizerConfig(momentum=0.9),
        precision="float32",
        distribution="single",
        metrics=["accuracy"],
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    callback = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb"), update_freq=2)
    history = trainer.fit(images(16), epochs=2, batch_size=4, callbacks=[callback])
    assert len(history.history["loss"]) == 2

    tags, steps = set(), {}
    files = sorted((tmp_path / "tb" / "train").glob("events.out.tfevents.*"))
    assert files
    for path in files:
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags.add(value.tag)
                steps.setdefault(value.tag, []).append(event.step)
    assert {"batch_loss", "epoch_loss", "epoch_accuracy"} <= tags
    # 16 images in batches of 4: 4 steps per epoch, 8 in all (counted from 1), written every
    # second one (update_freq=2); one epoch_loss per epoch (counted from 0).
    assert sorted(steps["batch_loss"]) == [2, 4, 6, 8]
    assert sorted(steps["epoch_loss"]) == [0, 1]
