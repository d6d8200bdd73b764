"""The records path on any backend: `imagenet_dataset` / `coco_dataset` pipelines (tf.data)
feed the Trainer directly, under TensorFlow and under KERAS_BACKEND=jax (issue #26: on JAX
they ended in `TypeError: Cannot interpret 'tf.float32' as a data type`)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from coco_records import build_two_image_coco
from jpeg_records import write_jpeg_records
from training_helpers import sparse_ce

from cvbench.training import TrainConfig, Trainer
from cvbench.training.inputs import host_batch, split_batch

pytestmark = pytest.mark.backend_agnostic


@pytest.fixture(scope="module")
def imagenet_records(tmp_path_factory):
    """8 training and 6 validation records of 40x40 JPEGs, 4 classes."""
    root = tmp_path_factory.mktemp("imagenet")
    write_jpeg_records(root / "train-00000-of-00001", 8, prefix="train")
    write_jpeg_records(root / "validation-00000-of-00001", 6, prefix="validation")
    return root


@pytest.fixture(scope="module")
def coco_records(tmp_path_factory):
    """COCO records of 2 images of 20x30 pixels, one box each (categories 3 and 90)."""
    return build_two_image_coco(tmp_path_factory.mktemp("coco"), {3: "car", 90: "bus"})


def pooled_classifier() -> keras.Model:
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    return keras.Model(inputs, keras.layers.Dense(1000, dtype="float32")(x))


def test_the_trainer_fits_and_evaluates_imagenet_dataset_pipelines(imagenet_records):
    from cvbench.data import imagenet_dataset

    def read(split, training):
        return imagenet_dataset(
            imagenet_records, split, batch_size=4, image_size=32, training=training, seed=0
        )

    trainer = Trainer(
        pooled_classifier,
        sparse_ce(),
        schedule=0.1,
        precision="float32",
        distribution="single",
        metrics=["accuracy"],
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    # 8 records / batch 4 = 2 steps per epoch, the training pipeline repeats.
    trainer.fit(read("train", True), epochs=2, steps_per_epoch=2)
    assert trainer.state["step"] == 4
    assert trainer.state["skipped_steps"] == 0
    result = trainer.evaluate(read("validation", False))
    # 6 validation images: accuracy is a multiple of 1/6.
    assert result["accuracy"] * 6 == pytest.approx(round(result["accuracy"] * 6))
    assert np.isfinite(result["loss"])


def test_coco_dataset_batches_reach_the_backend_as_numpy_on_jax(coco_records):
    from cvbench.data import coco_dataset

    ds = coco_dataset(coco_records, "train", batch_size=2, image_size=32, training=True, seed=0)
    x, y, weight = host_batch(split_batch(next(iter(ds))))
    leaves = keras.tree.flatten((x, y))
    assert weight is None and len(leaves) >= 2
    expected = keras.config.backend() == "tensorflow"
    # TensorFlow keeps its tensors; any other backend gets NumPy arrays, values unchanged.
    for leaf in leaves:
        assert type(leaf).__module__.startswith("tensorflow") == expected
        assert isinstance(leaf, np.ndarray) != expected
    assert x.shape == (2, 32, 32, 3)
