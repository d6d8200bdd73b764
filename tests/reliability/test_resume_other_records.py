"""`train --resume` with --data-dir at another build or sharding of the same images names it
in a warning (probe p51, F6: the same images in 2 training shards instead of 1 resumed
without a word and trained on other batches). `run_settings` records the training shard set
(`train_records`); `resume.records_change` compares it; tf.data and grain alike."""

from __future__ import annotations

import shutil
import warnings

import pytest

from cvbench import cli
from cvbench.data import build_imagenet
from cvbench.demo.shapes_data import write_classification_set
from tests.reliability.test_hostile_runs import RESUME

OTHER_RECORDS = "with other training records"


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    """The 6-class shapes set (2 training images a class) as records in 1 training shard and
    in 2."""
    root = tmp_path_factory.mktemp("builds")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=2, val_per_class=1, seed=0
    ).path
    one, two = root / "one", root / "two"
    build_imagenet(raw, one, train_shards=1, val_shards=1, num_workers=1, progress=False)
    build_imagenet(raw, two, train_shards=2, val_shards=1, num_workers=1, progress=False)
    return one, two


def _resume_warnings(builds, tmp_path, backend: str, resumed_on: int) -> list[str]:
    """A one-step run on the 1-shard build, resumed (restored; nothing left to train) with
    --data-dir at build `resumed_on`: the warnings of the resume."""
    data = builds[0]
    argv = ["train", *RESUME, "--epochs", "1", "--seed", "0", "--data-backend", backend]
    run = tmp_path / "run"
    assert cli.main([*argv, "--data-dir", str(data), "--log-dir", str(run)]) == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = ["--data-dir", str(builds[resumed_on]), "--log-dir", str(run), "--resume"]
        assert cli.main([*argv, *resumed]) == 0
    shutil.rmtree(run)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("backend", ["tf", "grain"])
def test_a_resume_through_another_sharding_names_it(two_builds, tmp_path, backend):
    said = [m for m in _resume_warnings(two_builds, tmp_path, backend, 1) if OTHER_RECORDS in m]
    assert len(said) == 1  # before: none, and the run went on with other batches
    # 1 shard built, 2 now; the same 12 images (the build manifest counts them).
    assert "(1 shard, 12 records" in said[0] and "2 shards, 12 records" in said[0]


def test_a_resume_on_the_same_records_says_nothing_of_them(two_builds, tmp_path):
    assert not [m for m in _resume_warnings(two_builds, tmp_path, "tf", 0) if OTHER_RECORDS in m]
