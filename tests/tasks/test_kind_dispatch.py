"""What differs between kinds of model is asked of the task object (or of the one table of
a command keyed by the model file's kind), not decided by `if`s on a kind string."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.tasks import TASKS, ClassificationTask, DetectionTask, TaskOptions
from cvbench.utils import model_file


def _identity(size: int) -> keras.Model:
    inputs = keras.Input((size, size, 3))
    return keras.Model(inputs, keras.layers.Identity()(inputs))


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("model, size", [("resnet18", 32), ("inception_v3", 75)])
def test_a_classifier_file_is_fed_the_pipeline_s_normalized_images_mapped_back(model, size):
    task = ClassificationTask(TaskOptions(model=model, image_size=size, num_classes=4))
    means, stds = task.input_normalization()
    wrapped = task.from_user_model(_identity(size))
    # normalized 0 is the mean itself; normalized 1 is mean + std (x * std + mean)
    x = np.zeros((2, size, size, 3), "float32")
    x[1] = 1.0
    y = keras.ops.convert_to_numpy(wrapped(x))
    np.testing.assert_allclose(y[0, 0, 0], means, rtol=1e-5)
    np.testing.assert_allclose(y[1, 0, 0], np.add(means, stds), rtol=1e-5)


@pytest.mark.backend_agnostic
def test_a_detector_file_takes_the_pipeline_s_images_as_they_are():
    task = DetectionTask(TaskOptions(model="ssd320", num_classes=3))
    model = _identity(8)
    assert task.from_user_model(model) is model


def test_every_task_kind_answers_the_kind_questions():
    for kind in model_file.TASKS:
        task_class = TASKS.get(kind)
        assert task_class.name == kind
        assert callable(task_class.from_user_model) and callable(task_class.user_model)


def test_predict_has_one_entry_per_model_file_kind():
    from cvbench.cli.predict import _KINDS

    assert set(_KINDS) == set(model_file.TASKS)
    assert {k.noun for k in _KINDS.values()} == {"classifier", "detector"}


@pytest.mark.backend_agnostic
def test_the_task_says_its_post_processing():
    from cvbench.detection.predict import Decoder

    assert ClassificationTask(TaskOptions(model="resnet18", num_classes=4)).postprocess() is None
    task = DetectionTask(TaskOptions(model="ssd320", num_classes=3))
    post = task.postprocess()
    assert isinstance(post, Decoder)
    # SSD320 v1.2's anchors at 320x320: the task's own (the ones it trains with)
    np.testing.assert_array_equal(post.anchors, task.anchors)


@pytest.mark.parametrize("model, post", [("resnet18", False), ("ssd320", True)])
def test_latency_results_say_whether_the_calls_post_process(monkeypatch, model, post):
    from cvbench.benchmark import run
    from cvbench.benchmark.workloads import cvbench_model

    # every size out of memory: the flag comes from the task, not from a timed workload
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory")

    monkeypatch.setattr(run, "cvbench_inference", out_of_memory)
    spec = cvbench_model(model, num_classes=3)
    result = run.measure_latencies(spec, None, batch_sizes=(1,), precision="fp32")
    assert result.postprocessing is post and result.skipped == {1: "out of memory"}


def test_each_task_says_what_reads_its_records():
    assert TASKS.get("classification").data_backends == ("tf", "dali", "grain")
    assert TASKS.get("detection").data_backends == ("tf",)


@pytest.mark.parametrize("backend", ["dali", "grain"])
@pytest.mark.parametrize("task", ["detection", None])
def test_a_backend_the_task_cannot_read_with_is_refused_naming_who_can(backend, task):
    import argparse

    from cvbench.cli.errors import CLIError
    from cvbench.cli.task_args import data_backend_kwargs

    args = argparse.Namespace(
        data_backend=backend, dali_device=None, data_workers=None, data_dir="d", model="ssd320"
    )
    with pytest.raises(CLIError) as error:
        data_backend_kwargs(args, task=task)
    assert str(error.value) == f"--data-backend {backend} is for classification models, not ssd320"
