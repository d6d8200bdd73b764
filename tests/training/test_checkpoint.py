import keras
import numpy as np
import pytest

from cvbench.training.checkpoint import (
    CheckpointManager,
    find_checkpoint,
    load_checkpoint,
    restore_variables,
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
