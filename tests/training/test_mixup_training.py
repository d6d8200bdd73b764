"""Mixup batches train through the Trainer: soft labels into SparseCrossEntropy, whole steps.

The wiring a task uses: `cvbench.data.read.mixup.mixup` on the training batches only (evaluation
keeps integer labels), the loss `SparseCrossEntropy(label_smoothing, smoothing_classes)`,
which takes both kinds of label.
"""

import keras
import numpy as np
import tensorflow as tf
from training_helpers import images, tiny_classifier

from cvbench.data.read.mixup import mixup
from cvbench.training import TrainConfig, Trainer
from cvbench.training.losses import SparseCrossEntropy


def test_a_mixup_run_trains_on_soft_labels_and_evaluates_on_integer_ones():
    x, y = images(32, classes=3, seed=0)
    train = mixup(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True),
        alpha=0.2,
        num_classes=3,
        seed=0,
    )
    soft = next(iter(train))[1].numpy()
    assert soft.shape == (8, 3) and not np.array_equal(soft, np.round(soft))  # mixed labels
    trainer = Trainer(
        lambda: tiny_classifier(3),
        SparseCrossEntropy(0.1, smoothing_classes=4),
        schedule=0.05,
        precision="float32",
        distribution="single",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    start = trainer.evaluate((x, y), batch_size=32)["loss"]
    before = [keras.ops.convert_to_numpy(v).copy() for v in trainer.model.trainable_variables]
    trainer.fit(train, epochs=2)
    assert trainer.state["step"] == 8 and trainer.state["skipped_steps"] == 0
    after = trainer.evaluate((x, y), batch_size=32)["loss"]
    assert np.isfinite(after) and after != start
    moved = [
        not np.array_equal(a, keras.ops.convert_to_numpy(v))
        for a, v in zip(before, trainer.model.trainable_variables, strict=True)
    ]
    assert all(moved)
