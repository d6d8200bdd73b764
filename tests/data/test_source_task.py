"""The task asks a source object (`cvbench.tasks.sources`), not a string: the strings users
give (`data_backend`, `TaskOptions.reader`) map to a `DataSource` once, a source object can be
given directly, and a new source plugs in with nothing but `read` and `count`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

from cvbench.tasks import ClassificationTask, DetectionTask, TaskOptions
from cvbench.tasks.sources import DaliSource, GrainSource, RecordSource

pytestmark = pytest.mark.backend_agnostic

RANK_1_OF_2 = SimpleNamespace(rank=1, size=2)


class CountingSource:
    """A new input path: what it was asked, and 10 records in every split."""

    name = "mine"
    counts_corrupt = False

    def __init__(self) -> None:
        self.asked: list = []

    def read(self, data_dir, *, spec, **options):
        self.asked.append((data_dir, spec, options))
        return ["batch"]

    def count(self, data_dir, split, *, skip_corrupt):
        return 10


def _options(data_dir, **kw):
    # Records without dataset_info.json: num_classes says how many classes there are.
    return TaskOptions(model="resnet18", data_dir=str(data_dir), num_classes=3, image_size=32, **kw)


def test_a_new_source_plugs_into_the_task(tmp_path):
    source = CountingSource()
    task = ClassificationTask(_options(tmp_path), data_backend=source)
    assert task.source() is source and task.data_backend == "mine"
    data = task.train_data(batch_size=2, distribution=RANK_1_OF_2, seed=5)
    # 10 records, 2 ranks of batch 2: a global batch of 4, 10 // 4 = 2 steps per epoch.
    assert data.steps_per_epoch == 2
    assert data.data(3) == ["batch"]  # epoch 3: seed 5 + 3
    ((data_dir, spec, options),) = source.asked
    assert data_dir == str(tmp_path)
    assert (spec.split, spec.training, spec.seed) == ("train", True, 8)
    assert (spec.num_shards, spec.shard_index, spec.batch_size, spec.image_size) == (2, 1, 2, 32)
    assert spec.corrupt_counter is None  # counts_corrupt False
    assert options["num_classes"] == 3 and "preprocessing" in options
    task.evaluation_data(batch_size=4, distribution=RANK_1_OF_2)
    assert source.asked[-1][1].split == "validation" and not source.asked[-1][1].training


@pytest.mark.parametrize(
    "backend, expected",
    [
        ("tf", RecordSource),
        ("dali", DaliSource),
        ("grain", GrainSource),
    ],
)
def test_each_data_backend_name_maps_to_its_source(tmp_path, backend, expected):
    task = ClassificationTask(_options(tmp_path, data_workers=3), data_backend=backend)
    source = task.source()
    assert type(source) is expected and source.name == backend == task.data_backend
    if backend == "grain":
        assert source.workers == 3  # options.data_workers
    if backend == "tf":
        from cvbench.data import imagenet_dataset

        assert source.dataset_fn is imagenet_dataset


def test_the_reader_option_chooses_grain_too_and_a_source_object_keeps_its_settings(tmp_path):
    by_reader = ClassificationTask(_options(tmp_path, reader="grain", data_workers=1))
    assert by_reader.source() == GrainSource(1)
    given = ClassificationTask(_options(tmp_path), data_backend=GrainSource(workers=2))
    assert given.source() == GrainSource(2)
    dali = ClassificationTask(_options(tmp_path), data_backend=DaliSource(device="mixed"))
    assert (dali.data_backend, dali.dali_device) == ("dali", "mixed")


def test_detection_reads_coco_records_through_tf_data(tmp_path):
    from cvbench.data import coco_dataset

    task = DetectionTask(TaskOptions(model="ssd320", num_classes=3, image_size=128))
    source = task.source()
    assert isinstance(source, RecordSource) and source.dataset_fn is coco_dataset


@pytest.mark.parametrize(
    "options, kwargs, message",
    [
        ({"data_dir": None}, {}, "the grain reader does not support synthetic data"),
        ({"reader": "tf"}, {}, "data_backend='grain' and reader='tf' disagree"),
        ({}, {"eval_preprocess": lambda b: b}, "does not support train_preprocess"),
    ],
    ids=["synthetic", "reader_tf", "preprocess"],
)
def test_data_backend_grain_refuses_what_grain_does_not_do_at_construction(
    tmp_path, options, kwargs, message
):
    base = {"model": "resnet18", "data_dir": str(tmp_path), "num_classes": 3}
    with pytest.raises(ValueError, match=message):
        ClassificationTask(TaskOptions(**{**base, **options}), data_backend="grain", **kwargs)


@pytest.mark.parametrize("bad", ["jpeg", 3, object()])
def test_a_bad_data_backend_is_refused_naming_it(tmp_path, bad):
    with pytest.raises(ValueError, match="data_backend must be one of"):
        ClassificationTask(_options(tmp_path), data_backend=bad)


def test_bad_source_settings_are_refused():
    with pytest.raises(ValueError, match="dali_device must be one of"):
        DaliSource(device="gpu")
    with pytest.raises(ValueError, match="data_workers must be an int >= 0, got -1"):
        GrainSource(workers=-1)


def test_sources_import_no_tensorflow(tmp_path):
    blocker = tmp_path / "no_tf" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no TensorFlow here')\n")
    code = textwrap.dedent(
        """
        import sys
        from cvbench.tasks.sources import GrainSource
        assert "tensorflow" not in sys.modules
        print(GrainSource(2))
        """
    )
    # Keras on JAX (its TensorFlow backend imports TensorFlow, as the tasks' package imports
    # Keras): the grain path's setting.
    env = dict(os.environ, PYTHONPATH=str(blocker.parent), KERAS_BACKEND="jax")
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "GrainSource(workers=2)"


def test_grain_by_data_backend_reads_what_grain_by_reader_reads(tmp_path_factory):
    pytest.importorskip("grain")
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("source_records")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=1, val_per_class=1, seed=0
    )
    out = root / "records"
    build_imagenet(raw.path, out, train_shards=1, val_shards=1, num_workers=1, progress=False)
    options = TaskOptions(model="resnet18", data_dir=str(out), image_size=32)
    by_backend = ClassificationTask(options, data_backend="grain")
    by_reader = ClassificationTask(
        TaskOptions(model="resnet18", data_dir=str(out), image_size=32, reader="grain")
    )
    rank = SimpleNamespace(rank=0, size=1)
    ours = list(by_backend.evaluation_data(batch_size=4, distribution=rank))
    theirs = list(by_reader.evaluation_data(batch_size=4, distribution=rank))
    # 6 validation records at batch 4: 2 batches, the same arrays.
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert by_backend._count("train") == 6
