"""The grain reader wired into the tasks (`TaskOptions.reader`, `RecordTask.read`): the
default on JAX where TensorFlow cannot be imported, the same evaluation batches and class
names as the tf.data reader through a `ClassificationTask`, the training count without
TensorFlow, and the options it refuses."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import keras
import numpy as np
import pytest

from cvbench.data.read.model_inputs import ATTRIBUTE
from cvbench.tasks import ClassificationTask, TaskOptions
from cvbench.tasks import base as task_base

pytestmark = pytest.mark.backend_agnostic

NAMES = ("circle", "cross", "diamond", "square", "star", "triangle")  # the shapes, sorted


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """`build-imagenet` records of the shapes set: 6 classes x 4 training images of 32 x 32
    (24 records in 2 shards), 1 validation image each (6 records), with dataset_info.json."""
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("wired_records")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=4, val_per_class=1, seed=0
    )
    out = root / "records"
    build_imagenet(raw.path, out, train_shards=2, val_shards=1, num_workers=1, progress=False)
    return out


def _task(records, reader, **options):
    return ClassificationTask(
        TaskOptions(
            model="resnet18", data_dir=str(records), image_size=32, reader=reader, **options
        )
    )


def _ceil(a, b):
    return -(-a // b)


def _ranks(size):
    return [SimpleNamespace(rank=r, size=size) for r in range(size)]


def test_the_default_reader_is_grain_on_jax_where_tensorflow_cannot_be_imported(monkeypatch):
    options = TaskOptions(model="resnet18", num_classes=3)
    for backend, importable, reader in [
        ("jax", False, "grain"),
        ("jax", True, "tf"),
        ("tensorflow", False, "tf"),  # (the TensorFlow backend has TensorFlow)
    ]:
        monkeypatch.setattr(keras.config, "backend", lambda b=backend: b)
        monkeypatch.setattr(task_base, "tensorflow_importable", lambda i=importable: i)
        assert task_base.record_reader(options) == reader, (backend, importable)
    monkeypatch.setattr(task_base, "tensorflow_importable", lambda: False)
    for named in ("tf", "grain"):  # a named reader is taken as named
        assert task_base.record_reader(TaskOptions(model="resnet18", reader=named)) == named


def test_an_unknown_reader_is_refused():
    message = r"reader must be one of \('tf', 'grain'\) or None, got 'dali'"
    with pytest.raises(ValueError, match=message):
        TaskOptions(model="resnet18", reader="dali")


@pytest.mark.parametrize("size", [1, 2, 4])
def test_evaluation_through_the_task_equals_tf_datas_batches_and_covers_every_record_once(
    records, size
):
    # The same batches bit for bit (tests/data/grain/test_grain_dataset.py says why), on every
    # rank: 6 records over `size` ranks at batch 4: ceil(ceil(6 / size) / 4) batches each, the
    # weights over ranks summing to 6 (every record once; padding weighs 0).
    grain_task, tf_task = _task(records, "grain"), _task(records, "tf")
    total = 0.0
    for rank in _ranks(size):
        ours = grain_task.evaluation_data(batch_size=4, distribution=rank)
        theirs = list(tf_task.evaluation_data(batch_size=4, distribution=rank))
        ours = list(ours)
        assert len(ours) == len(theirs) == _ceil(_ceil(6, size), 4)
        for a, b in zip(ours, theirs, strict=True):
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(x, np.asarray(y))
        total += sum(float(batch[2].sum()) for batch in ours)
    assert total == 6.0


def test_grain_batches_carry_the_class_names_and_the_recipes_inputs(records):
    task = _task(records, "grain")
    data = task.evaluation_data(batch_size=4, distribution=_ranks(1)[0])
    inputs = getattr(data, ATTRIBUTE)
    assert task.class_names == NAMES and inputs.class_names == NAMES
    assert inputs == task.inputs()  # what the tf.data reader attaches, and the task's own
    assert task.num_classes == 6


def test_training_through_the_task_counts_records_without_tensorflow_and_reads_each_once(
    records, monkeypatch
):
    # 24 training records over 2 ranks at batch 4: 24 // 8 = 3 steps an epoch; each rank
    # reads its 12 records (labels 0..5, 4 images each, in build-imagenet's shard order)
    # exactly once per epoch in 3 batches of 4. The count comes from the record offsets,
    # not `cvbench.data.num_examples` (which imports TensorFlow).
    task = _task(records, "grain")
    monkeypatch.setattr(task, "count_records", lambda split: pytest.fail("tf.data count used"))
    labels = []
    for rank in _ranks(2):
        data = task.train_data(batch_size=4, distribution=rank, seed=1)
        assert data.steps_per_epoch == 3
        epoch = list(itertools.islice(data.data(0), data.steps_per_epoch))  # (it repeats)
        assert len(epoch) == 3 and all(x.shape == (4, 32, 32, 3) for x, _ in epoch)
        labels += [int(v) for _, y in epoch for v in y]
    assert sorted(labels) == sorted(list(range(6)) * 4)


@pytest.mark.parametrize(
    "options, kwargs, message",
    [
        ({"recipe": "resnet50_v1.5_250e"}, {}, "mixup"),
        ({}, {"data_backend": "dali"}, "the DALI data backend"),
        ({}, {"eval_preprocess": lambda image: image}, "train_preprocess / eval_preprocess"),
    ],
    ids=["mixup", "dali", "preprocess"],
)
def test_what_the_grain_reader_does_not_support_is_refused_naming_it(
    records, options, kwargs, message
):
    model = {"model": None} if "recipe" in options else {"model": "resnet18"}
    task = ClassificationTask(
        TaskOptions(data_dir=str(records), reader="grain", **model, **options), **kwargs
    )
    with pytest.raises(ValueError, match=f"the grain reader does not support .*{message}"):
        task.evaluation_data(batch_size=4, distribution=_ranks(1)[0])


def test_grain_is_refused_for_detection_records(tmp_path):
    from cvbench.tasks import DetectionTask

    task = DetectionTask(TaskOptions(model="ssd320", num_classes=3, reader="grain"))
    object.__setattr__(task.options, "data_dir", str(tmp_path))
    with pytest.raises(ValueError, match="does not support the detection task"):
        task.reader()


def test_data_workers_reach_grain_and_bad_counts_are_refused(records):
    task = _task(records, "grain", data_workers=2)
    assert task.evaluation_data(batch_size=4, distribution=_ranks(1)[0]).num_workers == 2
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="data_workers must be an int >= 0"):
            TaskOptions(model="resnet18", data_workers=bad)
