"""Hostile runs of #37 (WP4): a damaged record met again and again by a repeating stream is
counted and printed once; CRC damage is called CRC damage, and a bad records file exits 1."""

from __future__ import annotations

import struct

import pytest
from jpeg_records import write_jpeg_records

import cvbench.cli as cli

F = ["--model", "resnet18", "--image-size", "32", "--num-classes", "4", "--batch-size", "2"]
F += ["--steps-per-epoch", "2", "--epochs", "1", "--precision", "fp32"]
QUIET = ["--no-progress", "--no-export", "--log-every", "0", "--seed", "0", "--eval", "none"]


def record_offset(data: bytes, index: int) -> int:
    """The byte offset of record `index` of the TFRecord file bytes `data`."""
    offset = 0
    for _ in range(index):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 12 + length + 4
    return offset


def damage(path, index: int, *, where: str):
    """Flips a byte of record `index`: in its data (its data CRC then fails) or in its
    length (its length CRC then fails); returns the record's offset."""
    data = bytearray(path.read_bytes())
    offset = record_offset(data, index)
    (length,) = struct.unpack("<Q", data[offset : offset + 8])
    data[offset + 12 + length // 2 if where == "data" else offset + 2] ^= 0x01
    path.write_bytes(bytes(data))
    return offset


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))
    monkeypatch.delenv("CVBENCH_DEBUG", raising=False)


# ------------------------------------------------------------------ H: exact corrupt counts
def test_a_repeating_stream_counts_and_prints_a_damaged_element_once(capfd):
    import tensorflow as tf

    from cvbench.data.read.corrupt import CorruptRecordCounter, apply_policy

    counter = CorruptRecordCounter()
    ds = tf.data.Dataset.range(4).repeat(50)  # element 2 is "damaged": met 50 times
    ds = apply_policy(
        ds,
        lambda e: tf.not_equal(e, 2),
        lambda e: tf.strings.join(["bad element ", tf.strings.as_string(e)]),
        skip_corrupt=True,
        counter=counter,
    )
    assert len(list(ds)) == 150  # 200 elements, 50 of them the damaged one: all dropped
    assert counter.count == 1  # before: 50
    err = capfd.readouterr().err
    assert err.count('cvbench: skipped corrupt input: "bad element 2"') == 1


def test_skip_corrupt_counts_a_crc_damaged_record_once_in_a_training_run(tmp_path, capfd):
    import json

    data = tmp_path / "data"
    shard = write_jpeg_records(data / "train-00000-of-00001", 24, prefix="train")
    damage(shard, 13, where="data")
    run = tmp_path / "run"
    argv = ["train", *F, "--data-dir", str(data), *QUIET, "--skip-corrupt", "--log-dir", str(run)]
    assert cli.main(argv) == 0
    out, err = capfd.readouterr()
    # TensorFlow's reader stops the file at the damaged record 13; the reader reads on from
    # record 14 (#39), so record 13 alone is lost, counted once however often the repeating
    # stream met it (before: records 13..23 (11) lost; before that, 770 warnings and
    # "skipped 8470 corrupt records" in this run).
    warnings = [line for line in err.splitlines() if "skipped corrupt input" in line]
    assert len(warnings) == 1 and f"{shard}: the reader stopped at record 13" in warnings[0]
    assert "1 records were not read" in warnings[0]
    assert "cvbench: skipped 1 corrupt record (--skip-corrupt)" in out.splitlines()
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    counted = [e for e in events if e["event"] == "corrupt_records"]
    assert len(counted) == 1 and counted[0]["count"] == 1


# ------------------------------------------------------------ I: CRC damage is not truncation
def test_a_damaged_record_length_is_a_crc_mismatch_not_a_truncation(tmp_path):
    from cvbench.data.tfrecord import scan_tfrecord

    shard = write_jpeg_records(tmp_path / "train-00000-of-00001", 24, prefix="train")
    size = shard.stat().st_size
    offset = damage(shard, 13, where="length")  # record 13 now claims 64 KiB more data
    scan = scan_tfrecord(shard)
    assert (scan.num_records, scan.valid_bytes, scan.crc_mismatch) == (13, offset, True)
    assert scan.describe() == (
        f"TFRecord file {shard} is damaged: CRC mismatch in the length of record 13 at byte "
        f"{offset}; 13 complete records before it, {size - offset} bytes from there cannot "
        "be read"
    )  # before: "... is truncated: 13 complete records, then ... bytes of an incomplete record"


def test_a_damaged_records_file_is_one_line_and_exit_1(tmp_path, capsys):
    data = tmp_path / "data"
    shard = write_jpeg_records(data / "train-00000-of-00001", 24, prefix="train")
    offset = damage(shard, 13, where="length")
    argv = ["train", *F, "--data-dir", str(data), *QUIET, "--log-dir", str(tmp_path / "run")]
    assert cli.main(argv) == 1  # a bad input file (before: 2, a bad argument)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"cvbench train: error: TFRecord file {shard} is damaged: CRC mismatch in the length "
        f"of record 13 at byte {offset}; 13 complete records before it, "
        f"{shard.stat().st_size - offset} bytes from there cannot be read; copy or build it "
        "again, or pass --skip-corrupt to read only its complete records"
    )


# ------------------------------------------------------- I: launchers that are not there
@pytest.mark.backend_agnostic
def test_stale_horovod_variables_are_named_before_horovod_starts():
    from cvbench.training.distributed import check_launcher_environment

    with pytest.raises(ValueError) as e:
        check_launcher_environment({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOME": "/h"})
    assert str(e.value) == (
        "HOROVOD_RANK=1, HOROVOD_SIZE=2 are set but no launcher started this process (no "
        "HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT): left from another job? Unset HOROVOD_RANK "
        "HOROVOD_SIZE to train in one process, or start cvbench with horovodrun"
    )
    from ports import free_port

    port = free_port()  # nothing listens there: horovodrun's rendezvous server is gone
    env = {"HOROVOD_RANK": "0", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1"}
    env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = str(port)
    with pytest.raises(ValueError, match=f"no rendezvous server answers at 127.0.0.1:{port}"):
        check_launcher_environment(env)
    mpi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    with pytest.raises(ValueError, match="^OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE=2 are"):
        check_launcher_environment(mpi)  # no mpirun contact: left from an allocation
    with pytest.raises(ValueError, match="built without MPI: start cvbench with horovodrun --gloo"):
        check_launcher_environment({**mpi, "PMIX_SERVER_URI41": "x"}, mpi_built=False)
    check_launcher_environment({**mpi, "PMIX_SERVER_URI41": "x"}, mpi_built=True)  # mpirun
    check_launcher_environment({"PATH": "/bin"})  # no ranks: one process


def test_a_stale_horovod_environment_is_one_line_not_a_cxx_abort(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("horovod.tensorflow")
    cvbench = Path(sys.executable).with_name("cvbench")
    env = dict(os.environ, HOROVOD_RANK="1", HOROVOD_SIZE="2", KERAS_BACKEND="tensorflow")
    argv = [str(cvbench), "train", *F, "--synthetic", *QUIET, "--log-dir", str(tmp_path / "r")]
    # Before: Gloo waited 30 s for a rendezvous, then terminate() with gloo::IoException.
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "gloo" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "cvbench: error: HOROVOD_RANK=1, HOROVOD_SIZE=2 are set but no launcher started this "
        "process (no HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT): left from another job? Unset "
        "HOROVOD_RANK HOROVOD_SIZE to train in one process, or start cvbench with horovodrun"
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.backend_agnostic
def test_waiting_for_a_closed_jax_coordinator_is_said_and_bounded(capsys):
    import time

    from ports import free_port

    from cvbench.training.jax_distributed import COORDINATOR_TIMEOUT_S, wait_for_coordinator

    assert COORDINATOR_TIMEOUT_S == 120  # JAX's own: 300 s in silence, then a C++ abort
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ConnectionError) as e:
        wait_for_coordinator(address, process_id=1, num_processes=2, timeout_s=1)
    assert time.monotonic() - started < 5
    assert str(e.value) == (
        f"the JAX coordinator at {address} did not answer within 1 s (Connection refused): "
        "start process 0 there first, check KERAS_DISTRIBUTION_JOB_ADDRESSES, or wait longer "
        "with --coordinator-timeout"
    )
    assert capsys.readouterr().out == (
        f"cvbench: process 1 of 2 waits for the JAX coordinator at {address} (up to 1 s; "
        "--coordinator-timeout)\n"
    )


def test_an_unreachable_jax_coordinator_is_one_line_and_exit_1(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ports import free_port

    pytest.importorskip("jax")
    address = f"127.0.0.1:{free_port()}"
    cvbench = Path(sys.executable).with_name("cvbench")
    env = dict(os.environ, KERAS_DISTRIBUTION_JOB_ADDRESSES=address)
    env.update(KERAS_DISTRIBUTION_NUM_PROCESSES="2", KERAS_DISTRIBUTION_PROCESS_ID="1")
    argv = [str(cvbench), "train", *F, "--synthetic", *QUIET, "--backend", "jax"]
    argv += ["--coordinator-timeout", "2", "--log-dir", str(tmp_path / "r")]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr[-2000:]
    assert f"cvbench: process 1 of 2 waits for the JAX coordinator at {address}" in run.stdout
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"cvbench train: error: the JAX coordinator at {address} did not answer within 2 s "
        "(Connection refused): start process 0 there first, check "
        "KERAS_DISTRIBUTION_JOB_ADDRESSES, or wait longer with --coordinator-timeout"
    )


# ------------------------------------------------------ J: what the labels mean, and the seed
def shapes_records(root, *, rename=None):
    """`build-imagenet` records of the 6-class shapes set (1 training, 1 validation image a
    class), with one class folder renamed first (`rename=(old, new)`)."""
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=1, val_per_class=1, seed=0
    ).path
    if rename is not None:
        for split in ("train", "val"):
            (raw / split / rename[0]).rename(raw / split / rename[1])
    out = root / "records"
    build_imagenet(raw, out, train_shards=1, val_shards=1, num_workers=1, progress=False)
    return out


RESUME = ["--model", "resnet18", "--image-size", "32", "--batch-size", "2", "--precision", "fp32"]
RESUME += ["--steps-per-epoch", "1", "--no-progress", "--no-export", "--log-every", "0"]
RESUME += ["--eval", "none"]


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """One epoch of one step on the shapes records (classes circle, cross, diamond, square,
    star, triangle), seed 0; and the same records rebuilt with `cross` renamed `box`."""
    root = tmp_path_factory.mktemp("shapes")
    data = shapes_records(root / "a")
    renamed = shapes_records(root / "b", rename=("cross", "box"))
    run = root / "run"
    argv = ["train", *RESUME, "--data-dir", str(data), "--epochs", "1", "--seed", "0"]
    assert cli.main([*argv, "--log-dir", str(run)]) == 0
    return data, renamed, run


def copy_run(run, tmp_path):
    import shutil

    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.backend_agnostic
def test_resume_on_records_whose_class_names_changed_is_refused(shapes_run, tmp_path, capsys):
    _, renamed, run = shapes_run
    run = copy_run(run, tmp_path)
    argv = ["train", *RESUME, "--data-dir", str(renamed), "--epochs", "1", "--seed", "0"]
    capsys.readouterr()
    # Sorted, 'box' comes first: classes 0 and 1 changed names (every label of them shifted).
    assert cli.main([*argv, "--resume", "--log-dir", str(run)]) == 2  # before: resumed, 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("cvbench: error: cannot resume from ")
    assert (
        "this run differs from the checkpointed one (class names: 2 of 6 differ (class 0 "
        "'circle' in the checkpoint, 'box' now; class 1 'cross' in the checkpoint, 'circle' "
        "now)); pass --force-resume to resume anyway"
    ) in line
    assert cli.main([*argv, "--resume", "--force-resume", "--log-dir", str(run)]) == 0


@pytest.mark.backend_agnostic
def test_resume_with_another_seed_names_it(shapes_run, tmp_path, capsys):
    data, _, run = shapes_run
    run = copy_run(run, tmp_path)
    argv = ["train", *RESUME, "--data-dir", str(data), "--epochs", "1", "--seed", "1"]
    # Named, not refused: the checkpoint restores weights, optimizer and data order; the new
    # seed draws only the epochs still to come (before: not mentioned at all).
    message = r"with another seed \(seed 0 in the checkpoint, 1 now\): the weights, optimizer"
    with pytest.warns(UserWarning, match=message):
        assert cli.main([*argv, "--resume", "--log-dir", str(run)]) == 0


@pytest.mark.backend_agnostic
def test_resume_when_every_checkpoint_is_invalid_is_refused(shapes_run, tmp_path, capsys):
    import json

    data, _, run = shapes_run
    run = copy_run(run, tmp_path)
    checkpoints = sorted((run / "checkpoints").glob("ckpt-*.npz"))
    assert [p.name for p in checkpoints] == ["ckpt-0000000001.npz"]
    checkpoints[0].write_bytes(b"not a checkpoint")
    log_before = (run / "train_log.jsonl").read_bytes()
    argv = ["train", *RESUME, "--data-dir", str(data), "--epochs", "1", "--seed", "0"]
    capsys.readouterr()
    # Before: one warning, then training from step 0 again, the log repeating step 1.
    assert cli.main([*argv, "--resume", "--log-dir", str(run)]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (
        f"cvbench train: error: cannot resume from {run / 'checkpoints'}: none of its 1 "
        "checkpoints is valid (ckpt-0000000001.npz; the warnings above say why): remove them "
        "to start this run over, or train in another log directory"
    )
    steps = [json.loads(x).get("step") for x in (run / "train_log.jsonl").read_text().splitlines()]
    assert (run / "train_log.jsonl").read_bytes()[: len(log_before)] == log_before
    assert steps.count(1) <= log_before.decode().count('"step": 1')  # no step logged again


@pytest.mark.parametrize("reader", ["imagenet", "coco"])
def test_counting_a_damaged_split_names_the_file_unless_skipping(tmp_path, reader):
    # The task counts a split's records before reading it; the count took complete records
    # only, so a garbage shard became "data has fewer training images than one global
    # batch" (exit 2) instead of naming the damaged file (exit 1).
    import importlib

    from cvbench.utils.errors import BadFileError

    num_examples = importlib.import_module(f"cvbench.data.read.{reader}").num_examples
    name = "train-00000-of-00001" if reader == "imagenet" else "coco_train.record-00000-of-00001"
    shard = tmp_path / name
    shard.write_bytes(b"no file of any kind cvbench reads\n" * 4)  # 136 bytes, no record
    assert num_examples(tmp_path, "train") == 0  # skip_corrupt=True by default: complete only
    with pytest.raises(BadFileError, match=rf"{name} is damaged: CRC mismatch in the length"):
        num_examples(tmp_path, "train", skip_corrupt=False)
