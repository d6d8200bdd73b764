"""`DetectionTask` on synthetic data with the single-process Trainer, on any Keras backend.

Runs under TensorFlow with the rest of the suite and under KERAS_BACKEND=jax with
`-m backend_agnostic`: building the task, its model, loss and synthetic batches must work
without TensorFlow (only its TFRecord pipeline and evaluation over records need it), as on the
GPU machine, which has none. Keras itself imports TensorFlow when it is installed (to check
types while serializing configs), so on other backends the test makes it unimportable.
"""

import importlib.abc
import sys

import keras
import numpy as np
import pytest

from cvbench.tasks import DetectionTask, TaskOptions, build_trainer
from cvbench.training import SingleProcess, TrainConfig

pytestmark = [pytest.mark.backend_agnostic, pytest.mark.slow]


class _NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError(f"{name} is blocked: this test runs as on a machine without it")
        return None


@pytest.fixture
def without_tensorflow(monkeypatch):
    if keras.config.backend() == "tensorflow" or "tensorflow" in sys.modules:
        return False
    monkeypatch.setattr(sys, "meta_path", [_NoTensorFlow(), *sys.meta_path])
    return True


def test_synthetic_training_step_without_tensorflow(without_tensorflow):
    options = TaskOptions(model="ssd320", image_size=32, num_classes=3, synthetic_steps=2)
    task = DetectionTask(options, backbone="resnet18")
    assert task.label_map.category_ids == (1, 2, 3)
    trainer = build_trainer(  # the task's model, loss and recipe
        task,
        precision="float32",
        distribution="single",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    data = task.train_data(batch_size=2, distribution=SingleProcess(), seed=0)
    images, targets = next(iter(data.data(0)))
    # 32 px: P3-P7 grids of 4, 2, 1, 1, 1 cells a side = 23 locations, 6 anchors each (SSD320
    # v1.2: 3 scales x 2 aspect ratios) = 138.
    assert images.shape == (2, 32, 32, 3)
    assert targets["boxes"].shape[:2] == targets["classes"].shape[:2] == (2, 6 * 23)
    history = trainer.fit(data.data, epochs=1, steps_per_epoch=2, batch_size=2)
    assert trainer.state["step"] == 2
    assert np.isfinite(history.history["loss"]).all()
    if without_tensorflow:
        assert "tensorflow" not in sys.modules
