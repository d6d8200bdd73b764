"""Checkpoint faults: a damaged newest checkpoint, a file of another kind, a full disk, and a
resume into a run with another plan."""

from __future__ import annotations

import errno
import io
import json
import struct
import zipfile

import keras
import numpy as np
import pytest
from small_disk import SmallDisk
from training_helpers import blobs, sparse_ce, tiny_mlp

from cvbench.training import OptimizerConfig, ScheduleConfig, TrainConfig, Trainer
from cvbench.training.checkpoint import (
    CheckpointManager,
    CheckpointWriteError,
    arrays_checksum,
    load_checkpoint,
)

pytestmark = pytest.mark.backend_agnostic

KIB = 1024
# 16384 float32 values = 64 KiB of array data (np.savez does not compress).
BIG = 16384


def variables(value, n=BIG):
    return [keras.Variable(np.full((n,), value, "float32"), name="kernel")]


def flip_a_bit_of(path, value, n=4):
    """Flips the lowest bit of the first byte of the first run of `value` in the file."""
    data = bytearray(path.read_bytes())
    offset = data.find(np.full((n,), value, "float32").tobytes())
    assert offset > 0
    data[offset] ^= 1
    path.write_bytes(bytes(data))


# ----------------------------------------------------------------------- damaged checkpoints
def test_a_bit_flip_in_the_newest_checkpoint_is_detected_and_the_previous_one_used(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3)
    older = manager.save(1, model_variables=variables(1.5, n=4))
    newest = manager.save(2, model_variables=variables(2.5, n=4))
    flip_a_bit_of(newest, 2.5)
    why = f"{newest} is not a valid checkpoint: Bad CRC-32 for file 'model/0.npy'"
    with pytest.warns(UserWarning) as caught:
        path, meta, arrays = manager.latest()
    assert [str(w.message) for w in caught] == [f"skipping checkpoint: {why}"]
    assert path == older
    np.testing.assert_array_equal(arrays["model/0"], np.full((4,), 1.5, "float32"))


def test_the_checksum_catches_arrays_that_differ_from_the_ones_written(tmp_path):
    # An archive with consistent CRC-32s around changed values (changed before the archive
    # was written, in memory or by a copy tool): only the SHA-256 in the metadata sees it.
    manager = CheckpointManager(tmp_path, keep=3)
    older = manager.save(1, model_variables=variables(1.5, n=4))
    newest = manager.save(2, model_variables=variables(2.5, n=4))
    with np.load(newest) as data:
        arrays = {key: data[key] for key in data.files}
    arrays["model/0"] = arrays["model/0"].copy()
    arrays["model/0"][3] = 2.5000002  # one bit of the mantissa: 0x40200000 -> 0x40200001
    assert arrays["model/0"].view(np.uint32)[3] == 0x40200001
    np.savez(newest, **arrays)
    meta = json.loads(arrays.pop("meta").tobytes())
    actual = arrays_checksum(arrays)
    why = (
        f"{newest} is not a valid checkpoint: checksum mismatch: the arrays' SHA-256 is "
        f"{actual[:16]}..., the metadata says {meta['sha256'][:16]}... (the file is damaged)"
    )
    with pytest.raises(ValueError) as e:
        load_checkpoint(newest)
    assert str(e.value) == why
    with pytest.warns(UserWarning, match="checksum mismatch"):
        assert manager.latest()[0] == older


def test_the_checksum_covers_every_array_key_dtype_and_shape():
    a = {"model/0": np.zeros((2, 3), "float32")}
    assert len(arrays_checksum(a)) == 64
    assert arrays_checksum(a) == arrays_checksum({"model/0": np.zeros((2, 3), "float32")})
    for other in (
        {"model/1": np.zeros((2, 3), "float32")},
        {"model/0": np.zeros((3, 2), "float32")},
        {"model/0": np.zeros((2, 3), "int32")},
        {"model/0": np.eye(2, 3, dtype="float32")},
    ):
        assert arrays_checksum(other) != arrays_checksum(a)


def test_format_1_checkpoints_without_a_checksum_still_load(tmp_path):
    meta = {"format": 1, "model": [{"path": "k", "shape": [2], "dtype": "float32"}]}
    meta.update(optimizer=[], state={"step": 3})
    blob = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(tmp_path / "ckpt-0000000003.npz", **{"model/0": np.ones(2, "float32"), "meta": blob})
    loaded, arrays = load_checkpoint(tmp_path / "ckpt-0000000003.npz")
    assert loaded["state"] == {"step": 3} and arrays["model/0"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "write, why",
    [
        (lambda p: p.write_text("hello, not a checkpoint"), "cvbench:not-npz"),
        (lambda p: np.save(open(p, "wb"), np.zeros(3)), "cvbench:not-npz"),  # noqa: SIM115
        (lambda p: np.savez(open(p, "wb"), a=np.zeros(3)), "cvbench:no-meta"),  # noqa: SIM115
        (lambda p: p.write_bytes(b"PK"), "valid:2"),
        (lambda p: p.write_bytes(b""), "valid:0"),
    ],
)
def test_a_file_of_another_kind_is_not_a_cvbench_checkpoint(tmp_path, write, why):
    path = tmp_path / "model.npz"
    write(path)
    expected = {
        "cvbench:not-npz": f"{path} is not a cvbench checkpoint: it is not an .npz archive "
        "(checkpoints are the ckpt-<step>.npz files the Trainer writes in <log dir>/checkpoints)",
        "cvbench:no-meta": f"{path} is not a cvbench checkpoint: the .npz archive has no "
        "cvbench metadata (it holds a)",
        "valid:2": f"{path} is not a valid checkpoint: it ends after 2 bytes",
        "valid:0": f"{path} is not a valid checkpoint: it ends after 0 bytes",
    }[why]
    with pytest.raises(ValueError) as e:
        load_checkpoint(path)
    assert str(e.value) == expected


def test_a_checkpoint_archive_with_a_broken_member_is_not_valid(tmp_path):
    path = CheckpointManager(tmp_path).save(1, model_variables=variables(1.0, n=4))
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("model/1.npy", b"\x93NUMPY garbage")
    with pytest.raises(ValueError, match=f"^{path} is not a valid checkpoint: "):
        load_checkpoint(path)


# ----------------------------------------------------------------------- a full disk
@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(kib)` mounts a tmpfs of `kib` KiB at tmp_path/disk and returns the path;
    `small_disk.resize(kib)` changes its size (space freed). Root only: skipped elsewhere."""
    disk = SmallDisk(tmp_path / "disk")

    def mount(kib):
        return disk.mount(kib * 1024)

    mount.resize = mount
    try:
        yield mount
    finally:
        disk.unmount()


def test_a_full_disk_stops_the_write_and_keeps_the_previous_checkpoint(small_disk):
    disk = small_disk(100)  # room for one 64 KiB checkpoint, not two
    manager = CheckpointManager(disk / "checkpoints", keep=3)
    first = manager.save(1, model_variables=variables(1.0))
    with pytest.raises(CheckpointWriteError) as e:
        manager.save(2, model_variables=variables(2.0))
    assert str(e.value) == (
        f"no space left on device writing checkpoint {disk}/checkpoints/ckpt-0000000002.npz; "
        f"the previous checkpoint {first} is intact; free space and rerun with resume=True"
    )
    assert e.value.errno == errno.ENOSPC and isinstance(e.value.__cause__, OSError)
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name]  # no temporary left
    path, _, arrays = manager.latest()
    assert path == first and arrays["model/0"].tolist() == [1.0] * BIG

    small_disk.resize(400)
    second = manager.save(2, model_variables=variables(2.0))
    assert manager.latest()[0] == second


def test_a_full_disk_before_the_first_checkpoint_says_there_is_none(small_disk):
    disk = small_disk(32)
    with pytest.raises(CheckpointWriteError) as e:
        CheckpointManager(disk).save(5, model_variables=variables(1.0))
    assert str(e.value) == (
        f"no space left on device writing checkpoint {disk}/ckpt-0000000005.npz; no earlier "
        "checkpoint was written; free space and rerun with resume=True"
    )


def wide_mlp():
    # 64 x 128 + 128 + 128 x 2 + 2 = 8578 values: 34 KiB of weights, as much of momentum.
    inputs = keras.Input((64,))
    x = keras.layers.Dense(128, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(x))


def wide_data(n=16):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 64)).astype("float32"), rng.integers(0, 2, n).astype("int32")


def test_a_run_stopped_by_a_full_disk_resumes_once_space_is_back(small_disk):
    disk = small_disk(110)  # one checkpoint (about 68 KiB) and the logs, not two checkpoints
    config = TrainConfig(
        log_dir=str(disk), checkpoint_every=1, keep_checkpoints=1, log_every=0,
        progress_bar=False, export=False, seed=0,
    )  # fmt: skip
    trainer = Trainer(wide_mlp, sparse_ce(), schedule=0.1, precision="float32",
                      distribution="single", config=config)  # fmt: skip
    with pytest.raises(CheckpointWriteError) as e:
        trainer.fit(wide_data(), epochs=1, batch_size=4)
    first = disk / "checkpoints" / "ckpt-0000000001.npz"
    assert str(e.value) == (
        f"no space left on device writing checkpoint {disk}/checkpoints/ckpt-0000000002.npz; "
        f"the previous checkpoint {first} is intact; free space and rerun with resume=True"
    )
    assert load_checkpoint(first)[0]["state"]["step"] == 1

    small_disk.resize(1024)
    resumed = Trainer(wide_mlp, sparse_ce(), schedule=0.1, precision="float32",
                      distribution="single", config=config.replace(resume=True))  # fmt: skip
    resumed.fit(wide_data(), epochs=1, batch_size=4)
    assert resumed.state["step"] == 4  # steps 2-4 of the 16 / 4 = 4 steps
    names = sorted(p.name for p in (disk / "checkpoints").iterdir())
    assert names == ["ckpt-0000000004.npz"]


# ----------------------------------------------------------------------- another plan
def tiny_trainer(
    log_dir, *, model=tiny_mlp, precision="float32", schedule=0.1, optimizer=None, **config
):
    return Trainer(
        model,
        sparse_ce(),
        optimizer,
        schedule=schedule,
        precision=precision,
        distribution="single",
        config=TrainConfig(
            log_dir=str(log_dir), log_every=0, progress_bar=False, export=False, seed=0, **config
        ),
    )


@pytest.fixture
def two_epochs(tmp_path):
    """A finished run of 2 epochs x 4 steps (32 rows, batch 8): checkpoints at 4 and 8."""
    tiny_trainer(tmp_path).fit(blobs(32), epochs=2, batch_size=8)
    return tmp_path / "checkpoints" / "ckpt-0000000008.npz"


def refusal(path, differences):
    return (
        f"cannot resume from {path}: this run differs from the checkpointed one "
        f"({differences}); pass force_resume=True to resume anyway, or train in another log "
        "directory"
    )


@pytest.mark.parametrize(
    "change, differences",
    [
        ({"epochs": 3}, "epochs 2 in the checkpoint, 3 now"),
        (
            {"batch_size": 4},
            "steps per epoch 4 in the checkpoint, 8 now; global batch 8 in the checkpoint, 4 now",
        ),
        (
            # Dense(8) on 4 inputs + Dense(2 or 3): 4*8 + 8 + 8*2 + 2 = 58, 8*3 + 3 = 27 -> 67.
            {"model": lambda: tiny_mlp(classes=3)},
            "model 'functional' with 58 values in 4 variables in the checkpoint, 'functional' "
            "with 67 values in 4 variables now",
        ),
        (
            {"precision": "mixed_bfloat16"},
            "precision float32 in the checkpoint, mixed_bfloat16 now",
        ),
    ],
)
def test_a_resume_into_another_plan_is_refused_saying_what_differs(two_epochs, change, differences):
    fit = {"epochs": change.pop("epochs", 2), "batch_size": change.pop("batch_size", 8)}
    trainer = tiny_trainer(two_epochs.parents[1], resume=True, **change)
    with pytest.raises(ValueError) as e:
        trainer.fit(blobs(32), **fit)
    assert str(e.value) == refusal(two_epochs, differences)
    assert trainer.state["step"] == 0  # nothing restored, nothing trained


@pytest.mark.parametrize(
    "change, differences",
    [
        ({"schedule": 0.2}, "schedule 0.1 in the checkpoint, 0.2 now"),
        (
            {"optimizer": OptimizerConfig(weight_decay=1e-4, momentum=0.9)},
            "optimizer.momentum 0.875 in the checkpoint, 0.9 now; optimizer.weight_decay "
            "3.0517578125e-05 in the checkpoint, 0.0001 now",
        ),
        (
            {"optimizer": OptimizerConfig(name="lars")},
            'optimizer.name "sgd" in the checkpoint, "lars" now',
        ),
        (
            {"schedule": ScheduleConfig(decay="constant")},
            # a float rate then, a ScheduleConfig now: every field of it is new
            None,
        ),
    ],
)
def test_a_resume_with_other_optimizer_or_schedule_settings_is_refused(
    two_epochs, change, differences
):
    # Regression: only epochs, steps, batch, precision and the model were compared; another
    # learning rate, schedule, optimizer or weight decay resumed silently.
    trainer = tiny_trainer(two_epochs.parents[1], resume=True, **change)
    with pytest.raises(ValueError) as e:
        trainer.fit(blobs(32), epochs=2, batch_size=8)
    if differences is None:
        assert 'schedule.decay unset in the checkpoint, "constant" now' in str(e.value)
    else:
        assert str(e.value) == refusal(two_epochs, differences)
    assert trainer.state["step"] == 0


def test_the_task_settings_are_compared_too(two_epochs):
    # What prepare_run records (image size, label smoothing, recipe knobs): `run_settings`.
    first = tiny_trainer(two_epochs.parents[0] / "settings")
    first.run_settings = {"image_size": 32, "knobs": {"loss.label_smoothing": 0.1}}
    first.fit(blobs(32), epochs=1, batch_size=8)
    again = tiny_trainer(two_epochs.parents[0] / "settings", resume=True)
    again.run_settings = {"image_size": 64, "knobs": {"loss.label_smoothing": 0.1}}
    with pytest.raises(ValueError, match="settings.image_size 32 in the checkpoint, 64 now"):
        again.fit(blobs(32), epochs=1, batch_size=8)


def test_force_resume_continues_with_a_warning_naming_the_differences(two_epochs):
    trainer = tiny_trainer(two_epochs.parents[1], resume=True, force_resume=True)
    with pytest.warns(UserWarning) as caught:
        trainer.fit(blobs(32), epochs=3, batch_size=8)
    assert [str(w.message) for w in caught if "resum" in str(w.message)] == [
        f"resuming from {two_epochs} although this run differs from the checkpointed one "
        "(epochs 2 in the checkpoint, 3 now), as force_resume=True asks"
    ]
    assert trainer.state["step"] == 12 and trainer.state["epoch"] == 3


def test_the_same_plan_resumes_without_a_warning(two_epochs, recwarn):
    trainer = tiny_trainer(two_epochs.parents[1], resume=True)
    trainer.fit(blobs(32), epochs=2, batch_size=8)
    assert trainer.state["step"] == 8 and not [w for w in recwarn if "resum" in str(w.message)]


def test_force_resume_needs_resume(tmp_path):
    with pytest.raises(ValueError) as e:
        TrainConfig(log_dir=str(tmp_path), force_resume=True)
    assert str(e.value) == "TrainConfig.force_resume=True needs resume=True"


def test_checkpoints_record_the_plan(two_epochs):
    state = load_checkpoint(two_epochs)[0]["state"]
    plan = {k: state[k] for k in ("epochs", "steps_per_epoch", "planned_steps", "global_batch")}
    assert plan == {"epochs": 2, "steps_per_epoch": 4, "planned_steps": 8, "global_batch": 8}
    assert state["precision"] == "float32" and state["model"].startswith("functional")


# ----------------------------------------------------------------------- sizes asked for
def npy_header(shape, descr="<f4"):
    header = io.BytesIO()
    header_dict = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(header, header_dict)
    return header.getvalue()


def crafted(path, members):
    """An .npz of `members` (name -> bytes), stored, with a genuine cvbench `meta.npy`."""
    meta = {"format": 1, "model": [{"path": "k", "shape": [3], "dtype": "float32"}]}
    meta.update(optimizer=[], state={})
    blob = io.BytesIO()
    np.save(blob, np.frombuffer(json.dumps(meta).encode(), np.uint8))
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr("meta.npy", blob.getvalue())
    return path


def test_a_huge_npy_shape_in_a_small_file_is_refused_before_allocating(tmp_path):
    # 2**40 float32 = 4 TiB asked by a file of a few hundred bytes: numpy would allocate it
    # (MemoryError) before finding the data missing.
    path = crafted(
        tmp_path / "ckpt-0000000001.npz", {"model/0.npy": npy_header((2**40,)) + b"x" * 12}
    )
    with pytest.raises(ValueError) as e:
        load_checkpoint(path)
    assert str(e.value) == (
        f"{path} is not a valid checkpoint: member model/0.npy has a .npy header asking for "
        "shape (1099511627776,) of float32 (4.0 TiB), but holds 12 bytes of data"
    )


def patch_directory(path, name, offset, value):
    """Writes the 4-byte `value` at `offset` of `name`'s central directory entry (20: its
    compressed size, 24: its uncompressed size)."""
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")
    while data[at + 46 : at + 46 + len(name)] != name.encode():
        at = data.find(b"PK\x01\x02", at + 4)
    struct.pack_into("<I", data, at + offset, value)
    path.write_bytes(bytes(data))


GIB_2_8 = 3_000_000_000  # 2.8 GiB, within a zip entry's 32-bit size field


@pytest.mark.parametrize(
    "compression, fields, why",
    [
        (
            zipfile.ZIP_STORED,
            {24: GIB_2_8},
            "says it holds 2.8 GiB but stores 140 bytes uncompressed",
        ),
        (
            zipfile.ZIP_STORED,
            {20: GIB_2_8, 24: GIB_2_8},
            "says it stores 2.8 GiB at byte 0, past the end of the",
        ),
        (
            zipfile.ZIP_DEFLATED,
            {24: GIB_2_8},
            "says it holds 2.8 GiB from 71 bytes compressed, more than deflate can give (1032:1)",
        ),
    ],
    ids=["stored size", "past the end", "deflate ratio"],
)
def test_zip_entries_asking_for_more_than_the_file_holds_are_refused(
    tmp_path, compression, fields, why
):
    path = tmp_path / "ckpt-0000000001.npz"
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        z.writestr("model/0.npy", npy_header((3,)) + bytes(12))
    for offset, value in fields.items():
        patch_directory(path, "model/0.npy", offset, value)
    with pytest.raises(ValueError) as e:
        load_checkpoint(path)
    assert str(e.value).startswith(f"{path} is not a valid checkpoint: member model/0.npy {why}")


def test_an_oversized_metadata_member_is_refused(tmp_path, monkeypatch):
    from cvbench.training import checkpoint

    monkeypatch.setattr(checkpoint, "META_LIMIT", 100)
    path = crafted(tmp_path / "m.npz", {"model/0.npy": npy_header((3,)) + b"\0" * 12})
    with pytest.raises(ValueError) as e:
        load_checkpoint(path)
    assert str(e.value).startswith(f"{path} is not a valid checkpoint: its member meta.npy is ")
    assert str(e.value).endswith("bytes, over the limit of 100 bytes")


def test_a_crafted_newest_checkpoint_is_skipped_for_the_previous_one(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3)
    older = manager.save(1, model_variables=variables(1.5, n=3))
    crafted(tmp_path / "ckpt-0000000002.npz", {"model/0.npy": npy_header((2**40,)) + b"x" * 12})
    with pytest.warns(
        UserWarning,
        match=r"skipping checkpoint: .*ckpt-0000000002\.npz is not a valid checkpoint: member "
        r"model/0\.npy has a \.npy header asking for shape \(1099511627776,\)",
    ):
        assert manager.latest()[0] == older
