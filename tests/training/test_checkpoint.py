import errno
import json
import os

import keras
import numpy as np
import pytest

from cvbench.training.checkpoint import (
    CheckpointManager,
    CheckpointWriteError,
    find_checkpoint,
    load_checkpoint,
    read_checkpoint_meta,
    restore_variables,
    save_checkpoint,
)

pytestmark = pytest.mark.backend_agnostic


def variables(seed):
    rng = np.random.default_rng(seed)
    return [
        keras.Variable(rng.normal(size=(2, 3)).astype("float32"), name="kernel"),
        keras.Variable(np.int32(seed), dtype="int32", name="iterations"),
    ]


def values(vs):
    return [keras.ops.convert_to_numpy(v.value) for v in vs]


def test_round_trip_restores_every_value_and_the_state(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    model, opt = variables(1), variables(2)
    path = manager.save(7, model_variables=model, optimizer_variables=opt, state={"epoch": 1})
    assert path.name == "ckpt-0000000007.npz"
    target_model, target_opt = variables(3), variables(4)
    found_path, meta, arrays = manager.latest()
    assert found_path == path
    restore_variables(meta, arrays, model_variables=target_model, optimizer_variables=target_opt)
    restored = values(target_model) + values(target_opt)
    for a, b in zip(values(model) + values(opt), restored, strict=True):
        np.testing.assert_array_equal(a, b)
    assert meta["state"] == {"epoch": 1}


def test_keeps_only_the_newest(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    for step in (1, 2, 3):
        manager.save(step, model_variables=variables(step))
    assert [p.name for p in manager.checkpoints()] == ["ckpt-0000000002.npz", "ckpt-0000000003.npz"]


def test_a_damaged_newest_checkpoint_is_skipped(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(1, model_variables=variables(1))
    newest = manager.save(2, model_variables=variables(2))
    newest.write_bytes(newest.read_bytes()[:100])  # truncated by a failing disk
    with pytest.warns(UserWarning, match="skipping checkpoint"):
        path, meta, arrays = manager.latest()
    assert path.name == "ckpt-0000000001.npz"
    with pytest.raises(ValueError, match="not a valid checkpoint"):
        load_checkpoint(newest)


def test_temporaries_of_killed_writers_are_removed_and_ignored(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(5, model_variables=variables(5))
    stray = tmp_path / ".ckpt-0000000009.npz.abc123.tmp.npz"
    stray.write_bytes(b"half")
    assert [p.name for p in manager.checkpoints()] == ["ckpt-0000000005.npz"]
    manager.remove_temporaries()
    assert not stray.exists()


def test_mismatched_variables_are_refused(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, model_variables=variables(1))
    _, meta, arrays = manager.latest()
    with pytest.raises(ValueError, match="different model"):
        restore_variables(meta, arrays, model_variables=variables(1)[:1])
    wrong = [
        keras.Variable(np.zeros((3, 2), "float32")),
        keras.Variable(np.int32(0), dtype="int32"),
    ]
    with pytest.raises(ValueError, match="shape"):
        restore_variables(meta, arrays, model_variables=wrong)


def test_find_checkpoint_accepts_files_and_run_directories(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    manager.save(1, model_variables=variables(1))
    newest = manager.save(4, model_variables=variables(4))
    assert find_checkpoint(tmp_path) == newest
    assert find_checkpoint(tmp_path / "checkpoints") == newest
    assert find_checkpoint(newest) == newest
    with pytest.raises(FileNotFoundError):
        find_checkpoint(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no valid checkpoint"):
        find_checkpoint(tmp_path / "empty")


def test_save_checkpoint_returns_the_path_it_wrote(tmp_path):
    path = save_checkpoint(tmp_path / "one.npz", model_variables=variables(1))
    assert path == tmp_path / "one.npz" and path.is_file()
    meta, arrays = load_checkpoint(path)
    assert (meta["format"], meta["state"], sorted(arrays)) == (2, {}, ["model/0", "model/1"])


def test_format_1_checkpoints_load(tmp_path):
    # Written before the checksum existed: no "sha256" in the metadata.
    meta = {"format": 1, "model": [{"path": "k", "shape": [2], "dtype": "float32"}]}
    meta.update(optimizer=[], state={"step": 3})
    blob = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(tmp_path / "old.npz", **{"model/0": np.ones(2, "float32"), "meta": blob})
    loaded, arrays = load_checkpoint(tmp_path / "old.npz")
    assert loaded["state"] == {"step": 3} and arrays["model/0"].tolist() == [1.0, 1.0]


def test_arrays_that_differ_from_the_ones_written_fail_the_checksum(tmp_path):
    # The archive is rewritten with one value changed and the old metadata (consistent
    # CRC-32s): only the SHA-256 of format 2 sees it.
    path = save_checkpoint(tmp_path / "ckpt.npz", model_variables=variables(1))
    with np.load(path) as data:
        arrays = {key: data[key] for key in data.files}
    arrays["model/0"] = arrays["model/0"] + np.float32(1.0)
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="not a valid checkpoint: checksum mismatch"):
        load_checkpoint(path)


def test_an_archive_of_pickled_objects_is_refused_without_unpickling(tmp_path):
    meta = np.frombuffer(json.dumps({"format": 2}).encode(), np.uint8)
    np.savez(tmp_path / "evil.npz", meta=meta, **{"model/0": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError, match="not a valid checkpoint: Object arrays cannot be"):
        load_checkpoint(tmp_path / "evil.npz")


def test_keep_defaults_to_three_and_one_is_allowed(tmp_path):
    default = CheckpointManager(tmp_path / "default")
    single = CheckpointManager(tmp_path / "single", keep=1)
    for step in (1, 2, 3, 4, 5):
        default.save(step, model_variables=variables(step))
        single.save(step, model_variables=variables(step))
    assert [p.name[-7:-4] for p in default.checkpoints()] == ["003", "004", "005"]
    assert [p.name for p in single.checkpoints()] == ["ckpt-0000000005.npz"]
    with pytest.raises(ValueError, match="keep must be >= 1, got 0"):
        CheckpointManager(tmp_path, keep=0)


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_rotation_never_deletes_the_checkpoint_just_written(tmp_path, keep):
    # Regression (stop 47): a newer-named file (here an invalid ckpt-9 a resume skipped) was
    # counted among the newest `keep`, so with keep=1 the save of step 5 deleted ckpt-5 itself
    # and the run was left with no valid checkpoint. Rotation now removes older ones only.
    manager = CheckpointManager(tmp_path, keep=keep)
    for step in (1, 2, 3, 4):
        manager.save(step, model_variables=variables(step))
    junk = tmp_path / "ckpt-0000000009.npz"
    junk.write_bytes(b"not an archive")
    written = manager.save(5, model_variables=variables(5))
    names = [p.name[-7:-4] for p in manager.checkpoints()]
    # step 5 and the keep - 1 newest before it; the later-named file is left as it is
    assert names == [f"{s:03d}" for s in range(6 - keep, 6)] + ["009"]
    assert written.exists() and junk.read_bytes() == b"not an archive"
    assert manager.latest()[0] == written  # ckpt-9 is skipped with a warning


def test_a_directory_not_yet_created_has_no_checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path / "not-yet")
    assert manager.checkpoints() == []
    assert manager.latest() is None
    manager.remove_temporaries()  # nothing to do, no error
    assert not (tmp_path / "not-yet").exists()


def test_the_skipping_warning_points_at_the_caller(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, model_variables=variables(1)).write_bytes(b"PK\x03\x04 cut")
    with pytest.warns(UserWarning, match="skipping checkpoint") as caught:
        assert manager.latest() is None
    # (numpy leaves the file of a broken archive open: a ResourceWarning may come too.)
    assert [w.filename for w in caught if w.category is UserWarning] == [__file__]


@pytest.fixture
def full_disk(monkeypatch):
    """np.savez writes a few bytes, then fails as a full disk (or quota) does."""

    def use(code):
        def savez(file, **arrays):
            file.write(b"PK\x03\x04")
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(np, "savez", savez)

    return use


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_names_the_newest_intact_checkpoint(tmp_path, full_disk, code):
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(1, model_variables=variables(1))
    second = manager.save(2, model_variables=variables(2))
    full_disk(code)
    with pytest.raises(CheckpointWriteError) as e:
        manager.save(3, model_variables=variables(3))
    assert str(e.value) == (
        f"{os.strerror(code).lower()} writing checkpoint {tmp_path}/ckpt-0000000003.npz; "
        f"the previous checkpoint {second} is intact; free space and rerun with resume=True"
    )
    assert e.value.errno == errno.ENOSPC
    # Step 2 again (a skipped step re-saves the same step): the old ckpt-2 is still intact
    # (the write goes to a temporary file) and it is the newest, the one a resume loads.
    with pytest.raises(CheckpointWriteError, match=f"the previous checkpoint {second} is"):
        manager.save(2, model_variables=variables(9))
    assert [p.name for p in manager.checkpoints()] == [
        "ckpt-0000000001.npz",
        "ckpt-0000000002.npz",
    ]
    assert manager.latest()[0] == second


def test_a_full_disk_before_any_checkpoint_says_so(tmp_path, full_disk):
    full_disk(errno.ENOSPC)
    with pytest.raises(CheckpointWriteError, match="; no earlier checkpoint was written; "):
        CheckpointManager(tmp_path).save(5, model_variables=variables(5))


def test_other_write_errors_are_raised_as_they_are(tmp_path, full_disk):
    full_disk(errno.EACCES)
    with pytest.raises(PermissionError) as e:
        CheckpointManager(tmp_path).save(5, model_variables=variables(5))
    assert not isinstance(e.value, CheckpointWriteError) and e.value.errno == errno.EACCES


def test_the_meta_alone_is_read_without_the_arrays(tmp_path, monkeypatch):
    from cvbench.training import checkpoint as ckpt

    path = save_checkpoint(tmp_path / "ckpt.npz", model_variables=variables(1), state={"e": 3})
    full, _ = load_checkpoint(path)

    def no_arrays(*args, **kwargs):
        raise AssertionError("read_checkpoint_meta read the arrays")

    monkeypatch.setattr(ckpt, "arrays_checksum", no_arrays)
    assert read_checkpoint_meta(path) == full
    for damage, words in [
        (lambda b: b[:3], "ends after 3 bytes"),
        (lambda b: b"not a zip " + b, "not an .npz archive"),
        (lambda b: b[:200], "not a valid checkpoint"),
    ]:
        bad = tmp_path / "bad.npz"
        bad.write_bytes(damage(path.read_bytes()))
        with pytest.raises(ValueError, match=f"bad.npz.*{words}"):
            read_checkpoint_meta(bad)
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="other.npz is not a cvbench checkpoint: no cvbench"):
        read_checkpoint_meta(tmp_path / "other.npz")
    meta = np.frombuffer(json.dumps({"format": 99}).encode(), np.uint8)
    np.savez(tmp_path / "future.npz", meta=meta)
    with pytest.raises(ValueError, match="future.npz is not a valid checkpoint: unknown format 99"):
        read_checkpoint_meta(tmp_path / "future.npz")


def test_eval_reads_a_run_folders_checkpoint_arrays_once(tmp_path, monkeypatch):
    # Regression: `cvbench eval --checkpoint RUN` read the whole checkpoint for its settings
    # (saved_run), then again for its weights, after find_checkpoint had read it once more.
    from cvbench.cli.evaluate import newest_checkpoint
    from cvbench.tasks.evaluation import saved_run
    from cvbench.training import checkpoint as ckpt

    manager = CheckpointManager(tmp_path / "checkpoints")
    manager.save(1, model_variables=variables(1), state={"settings": {}})
    newest = manager.save(2, model_variables=variables(2), state={"settings": {}})
    reads = []
    real = ckpt.load_checkpoint
    monkeypatch.setattr(ckpt, "load_checkpoint", lambda p: reads.append(p) or real(p))
    found = newest_checkpoint(tmp_path)  # the run folder: the newest valid one, read once
    assert found == newest and reads == [newest]
    assert saved_run(found) == {}  # no recipe recorded: nothing to take; the meta only
    assert reads == [newest]
