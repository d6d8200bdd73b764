"""A resume on another Keras backend, or through another build or sharding of the training
records, is named in a warning, as another seed or input pipeline is (probe p51, F4 and F6:
a TensorFlow run resumed under KERAS_BACKEND=jax, and a run resumed with --data-dir at the
same images in 1 shard instead of 2, went on without a word and trained on other numbers
and batches). The checkpoint records the backend (`keras_backend`, by the Trainer) and the
identity of the training shard set (`train_records`, `cvbench.data.read.splits.
records_identity`); an older checkpoint without them resumes as before, without a warning.
"""

from __future__ import annotations

import json
import shutil
import warnings

import keras
import pytest
from training_helpers import blobs, plain_trainer

from cvbench.data.read.splits import list_split_files, records_identity
from cvbench.training import resume as resume_module
from cvbench.training.checkpoint import find_checkpoint, read_checkpoint_meta
from cvbench.training.resume import backend_change, records_change

pytestmark = pytest.mark.backend_agnostic

OTHER_BACKEND = {"tensorflow": "jax", "jax": "tensorflow"}


def _trainer(log_dir, **config):
    return plain_trainer(log_dir, **config)


def _stopped_run(log_dir, settings=None):
    """2 epochs x 4 steps (32 rows, batch 8), stopped after the first (the checkpoint at
    step 8 removed: the one at step 4 is left)."""
    first = _trainer(log_dir)
    first.run_settings = settings or {}
    first.fit(blobs(32), epochs=2, batch_size=8)
    for path in (log_dir / "checkpoints").glob("ckpt-0000000008*"):
        path.unlink()
    return first


def _resume(log_dir, settings=None):
    """Resumes the run in `log_dir` to its end; returns the warnings given."""
    again = _trainer(log_dir, resume=True)
    again.run_settings = settings or {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again.fit(blobs(32), epochs=2, batch_size=8)
    assert again.state["step"] == 8  # resumed from step 4, not refused
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_the_checkpoint_records_the_keras_backend(tmp_path):
    _stopped_run(tmp_path)
    meta = read_checkpoint_meta(find_checkpoint(tmp_path))
    assert meta["state"]["settings"]["keras_backend"] == keras.config.backend()


def test_a_resume_on_another_backend_is_named(tmp_path, monkeypatch):
    real = resume_module.run_identity
    now = keras.config.backend()
    other = OTHER_BACKEND[now]

    def on_the_other_backend(**kwargs):  # what a run under the other backend records
        return dict(real(**kwargs), keras_backend=other)

    monkeypatch.setattr(resume_module, "run_identity", on_the_other_backend)
    _stopped_run(tmp_path)
    monkeypatch.setattr(resume_module, "run_identity", real)
    messages = _resume(tmp_path)
    named = [m for m in messages if "another Keras backend" in m]
    assert len(named) == 1, messages
    assert f"on another Keras backend ({other} in the checkpoint, {now} now): " in named[0]
    assert "the rest of the run is not the run the checkpoint's would have been" in named[0]


def test_the_same_backend_and_an_older_checkpoint_resume_without_the_warning(tmp_path, monkeypatch):
    _stopped_run(tmp_path / "same")
    assert not [m for m in _resume(tmp_path / "same") if "Keras backend" in m]

    real = resume_module.run_identity

    def older(**kwargs):  # a checkpoint of a cvbench that did not record the backend
        identity = real(**kwargs)
        identity.pop("keras_backend", None)
        return identity

    monkeypatch.setattr(resume_module, "run_identity", older)
    _stopped_run(tmp_path / "older")
    meta = read_checkpoint_meta(find_checkpoint(tmp_path / "older"))
    assert "keras_backend" not in meta["state"]["settings"]
    monkeypatch.setattr(resume_module, "run_identity", real)
    assert _resume(tmp_path / "older") == []


def _records(folder, sizes, records=None):
    """A folder of train shards of `sizes` bytes, with a build manifest counting `records`
    per shard when given; returns `records_identity` of its train split."""
    folder.mkdir(parents=True)
    count = len(sizes)
    names = [f"train-{i:05d}-of-{count:05d}" for i in range(count)]
    for name, size in zip(names, sizes, strict=True):
        (folder / name).write_bytes(b"r" * size)
    if records is not None:
        shards = {n: {"records": r, "bytes": s, "skipped": []}
                  for n, r, s in zip(names, records, sizes, strict=True)}  # fmt: skip
        (folder / "cvbench_manifest.json").write_text(json.dumps({"shards": shards}))
    return records_identity(list_split_files(folder, "train"))


def test_records_identity_tells_another_sharding_and_keeps_a_moved_copy(tmp_path):
    two = _records(tmp_path / "two", [12141, 12211], records=[8, 8])
    one = _records(tmp_path / "one", [24300], records=[16])
    assert {k: two[k] for k in ("shards", "bytes", "records")} == {
        "shards": 2, "bytes": 24352, "records": 16}  # fmt: skip
    assert (one["shards"], one["bytes"], one["records"]) == (1, 24300, 16)
    shutil.copytree(tmp_path / "two", tmp_path / "moved")
    assert records_identity(list_split_files(tmp_path / "moved", "train")) == two
    # no manifest (another writer's records): the records are not counted, the files are
    bare = _records(tmp_path / "bare", [12141, 12211])
    assert bare["records"] is None and bare["files_sha256"] == two["files_sha256"]
    # the same count and total size in other shard sizes: still another set
    other = _records(tmp_path / "other", [12211, 12141], records=[8, 8])
    assert other["files_sha256"] != two["files_sha256"]


def test_a_resume_through_other_records_is_named(tmp_path):
    two = _records(tmp_path / "rec", [12141, 12211], records=[8, 8])
    one = _records(tmp_path / "rec 1shard", [24300], records=[16])
    _stopped_run(tmp_path / "run", {"data_pipeline": "tf", "train_records": two})
    messages = _resume(tmp_path / "run", {"data_pipeline": "tf", "train_records": one})
    named = [m for m in messages if "other training records" in m]
    assert len(named) == 1, messages
    assert (
        "with other training records (2 shards, 16 records, 24,352 bytes in the checkpoint, "
        "1 shard, 16 records, 24,300 bytes now): the data position restored counts batches "
        "of the checkpoint's records, so the rest of the run reads other batches"
    ) in named[0]


def test_the_same_records_and_an_older_checkpoint_resume_without_the_warning(tmp_path):
    two = _records(tmp_path / "rec", [12141, 12211], records=[8, 8])
    _stopped_run(tmp_path / "same", {"data_pipeline": "tf", "train_records": two})
    moved = dict(two)  # the same records copied elsewhere: the same identity
    assert not [m for m in _resume(tmp_path / "same", {"train_records": moved,
                "data_pipeline": "tf"}) if "records" in m]  # fmt: skip
    _stopped_run(tmp_path / "older", {"data_pipeline": "tf"})  # before train_records
    assert _resume(tmp_path / "older", {"data_pipeline": "tf", "train_records": two}) == []


@pytest.mark.parametrize(
    "stored, now",
    [
        ({}, {"shards": 1}),  # an older checkpoint
        ({"train_records": {"shards": 1}}, None),  # synthetic data now
        ({"train_records": None}, {"shards": 1}),  # synthetic data then
    ],
    ids=["older_checkpoint", "synthetic_now", "synthetic_then"],
)
def test_a_side_without_records_or_backend_is_not_compared(stored, now):
    meta = {"state": {"settings": stored}}
    assert records_change(meta, {"settings": {"train_records": now}}) is None
    assert backend_change(meta, {"settings": {"keras_backend": "jax"}}) is None
    assert backend_change({"state": {"settings": {"keras_backend": "jax"}}}, {}) is None
