"""The run directory seen by the real `cvbench train` process: a fresh run into a folder
holding a run, two runs into one folder at once, no `--log-dir`, a read-only folder, a file
where a folder belongs, a full disk mid-run and at the export, a crafted checkpoint and a log
cut mid-line. Each refusal is one line with its exit status, and every earlier file is
byte-identical afterwards (slow: subprocesses)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from small_disk import SmallDisk

HOLD_CLI = Path(__file__).with_name("hold_cli.py")
ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
# ResNet-18 at 32 px on synthetic data: 2 steps of 2 images an epoch; one checkpoint (weights
# and momentum) is about 85 MiB, the export (model.keras and keras_saved_model/) twice 43 MiB.
FLAGS = [
    "train", "--model", "resnet18", "--image-size", "32", "--num-classes", "4", "--synthetic",
    "--batch-size", "2", "--steps-per-epoch", "2", "--epochs", "1", "--eval", "none",
    "--no-progress", "--log-every", "1", "--burn-in", "0", "--seed", "0", "--precision", "fp32",
]  # fmt: skip
MIB = 2**20


def cvbench(*argv: str, hold: str | None = None, wait: bool = True):
    """The real command (through hold_cli.py, which holds it when `hold` is given)."""
    env = dict(ENV, CVBENCH_TEST_HOLD=hold) if hold else ENV
    command = [sys.executable, str(HOLD_CLI), *argv]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, text=True)  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` by relative path, with its SHA-256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def error_line(run: subprocess.CompletedProcess) -> str:
    """The one line on stderr (TensorFlow's start-up notes aside); no traceback."""
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("cvbench")]
    assert len(lines) == 1, run.stderr[-3000:]
    return lines[0]


@pytest.fixture
def small_disk(tmp_path):
    disk = SmallDisk(tmp_path / "disk")
    try:
        yield disk
    finally:
        disk.unmount()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A run folder of one finished epoch: a checkpoint, train_log.jsonl, tensorboard/."""
    run = tmp_path_factory.mktemp("finished") / "run"
    result = cvbench(*FLAGS, "--no-export", "--log-dir", str(run))
    assert result.returncode == 0, result.stderr[-3000:]
    return run


def copy_of(run: Path, where: Path) -> Path:
    subprocess.run(["cp", "-a", str(run), str(where)], check=True)
    return where


# ----------------------------------------------------------------------- one run per folder
@pytest.mark.slow
def test_a_fresh_run_into_a_folder_holding_a_run_is_refused(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path / "run")
    before = tree(run)
    result = cvbench(*FLAGS, "--seed", "1", "--log-dir", str(run))
    assert result.returncode == 2
    assert error_line(result) == (
        f"cvbench: error: {run} already holds a run (checkpoints/ckpt-0000000002.npz, "
        "train_log.jsonl): rerun with --resume to continue it, or train in another log "
        "directory"
    )
    assert tree(run) == before


@pytest.mark.slow
def test_a_second_run_into_a_folder_in_use_is_refused_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    first = cvbench(*FLAGS, "--no-export", "--log-dir", str(run), hold="after_step:1", wait=False)
    try:
        lines = []
        for line in first.stdout:  # the first run has trained and logged step 1
            lines.append(line)
            if line.startswith("HOLD after_step 1"):
                break
        else:
            raise AssertionError("".join(lines[-40:]))
        before = tree(run)
        for extra in ((), ("--resume",)):  # fresh or resuming: the folder is taken
            second = cvbench(*FLAGS, "--no-export", "--log-dir", str(run), *extra)
            assert second.returncode == 1, second.stderr[-3000:]
            line = error_line(second)
            assert line.startswith(
                f"cvbench train: error: {run} is in use by another training run (pid "
                f"{first.pid} on host {socket.gethostname()} since "
            )
            assert line.endswith("): wait for it to end, or train in another log directory")
            assert tree(run) == before
    finally:
        first.send_signal(signal.SIGKILL)  # a crash: the kernel lets the lock go
        first.wait(30)
    resumed = cvbench(*FLAGS, "--no-export", "--log-dir", str(run), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (run / "checkpoints" / "ckpt-0000000002.npz").is_file()


# ----------------------------------------------------------------------- no --log-dir
@pytest.mark.slow
def test_no_log_dir_says_that_nothing_will_be_saved(tmp_path):
    result = subprocess.run(
        [sys.executable, str(HOLD_CLI), *FLAGS, "--steps-per-epoch", "1"],
        capture_output=True, text=True, env=ENV, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("cvbench")] == [
        "cvbench train: no --log-dir: nothing will be saved (no checkpoints, no export); pass "
        "--log-dir DIR to keep the run"
    ]
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------- folders that fail
@pytest.mark.slow
def test_a_read_only_folder_is_one_line_and_changes_nothing(finished_run, small_disk):
    disk = small_disk.mount(200 * MIB)
    run = copy_of(finished_run, disk / "run")
    before = tree(run)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    with pytest.raises(OSError, match="Read-only file system"):  # even for root
        (run / "probe").write_text("x")
    cases = {  # a resume of the run there, a fresh run into a new folder there
        run / ".cvbench-run.lock": ["--log-dir", str(run), "--resume"],
        disk / "new": ["--log-dir", str(disk / "new")],
    }
    for path, flags in cases.items():
        result = cvbench(*FLAGS, *flags)
        assert result.returncode == 1
        assert error_line(result) == f"cvbench train: error: {path}: Read-only file system"
    assert tree(run) == before


@pytest.mark.slow
@pytest.mark.parametrize("where", ["the log dir", "checkpoints"])
def test_a_file_where_a_folder_belongs_is_one_line(finished_run, tmp_path, where):
    if where == "the log dir":
        run = path = tmp_path / "run"
        run.write_text("not a folder")
        reason = "not a directory (the run's log dir)"
    else:
        run = copy_of(finished_run, tmp_path / "run")
        path = run / "checkpoints"
        subprocess.run(["rm", "-r", str(path)], check=True)
        path.write_text("not a folder")
        reason = "not a directory (the run writes one)"
    before = tree(tmp_path)
    result = cvbench(*FLAGS, "--log-dir", str(run), "--resume")
    assert result.returncode == 1
    assert error_line(result) == f"cvbench train: error: {path}: {reason}"
    assert tree(tmp_path) == before


@pytest.mark.slow
def test_a_full_disk_mid_run_keeps_the_checkpoint_before_it(small_disk):
    disk = small_disk.mount(120 * MIB)  # one checkpoint (85 MiB), not two
    run = disk / "run"
    result = cvbench(*FLAGS, "--epochs", "2", "--no-export", "--log-dir", str(run))
    assert result.returncode == 1
    first = run / "checkpoints" / "ckpt-0000000002.npz"
    assert error_line(result) == (
        f"cvbench train: error: no space left on device writing checkpoint "
        f"{run}/checkpoints/ckpt-0000000004.npz; the previous checkpoint {first} is intact; "
        "free space and rerun with --resume"
    )
    assert sorted(os.listdir(first.parent)) == [first.name]  # no temporary left
    with np.load(first) as data:
        assert json.loads(data["meta"].tobytes())["state"]["step"] == 2


@pytest.mark.slow
def test_a_full_disk_writing_the_log_is_one_line_naming_it(small_disk):
    # Two pages: the lock file's and the TensorBoard events file's; the log's first line
    # finds no room (tmpfs counts whole pages).
    disk = small_disk.mount(8192)
    run = disk / "run"
    result = cvbench(*FLAGS, "--no-export", "--log-dir", str(run))
    assert result.returncode == 1
    assert error_line(result) == (
        f"cvbench train: error: {run}/train_log.jsonl: No space left on device"
    )


@pytest.mark.slow
def test_a_full_disk_at_the_export_is_one_line_naming_it(finished_run, small_disk):
    disk = small_disk.mount(160 * MIB)  # the checkpoint and model.keras, not keras_saved_model/
    run = copy_of(finished_run, disk / "run")
    before = tree(run)
    result = cvbench(*FLAGS, "--log-dir", str(run), "--resume")  # done: only the export
    assert result.returncode == 1
    assert error_line(result) == (
        f"cvbench train: error: {run}/export/keras_saved_model: No space left on device"
    )
    # Appended to: the log; rewritten by each run that takes the folder: the lock's holder.
    changing = ("train_log.jsonl", ".cvbench-run.lock")
    after = tree(run)
    assert {k: v for k, v in after.items() if k in before and k not in changing} == {
        k: v for k, v in before.items() if k not in changing
    }
    log = (run / "train_log.jsonl").read_bytes()
    assert log.startswith((finished_run / "train_log.jsonl").read_bytes())  # appended only
    assert not list((run / "export").glob(".export-*"))  # no staging left (staging_folder)


# ----------------------------------------------------------------------- files that lie
@pytest.mark.slow
def test_a_crafted_checkpoint_is_one_line_and_skipped_by_a_resume(finished_run, tmp_path):
    import io
    import zipfile

    run = copy_of(finished_run, tmp_path / "run")
    header = io.BytesIO()
    huge = {"descr": "<f4", "fortran_order": False, "shape": (2**40,)}  # 4 TiB
    np.lib.format.write_array_header_1_0(header, huge)
    crafted = run / "checkpoints" / "ckpt-0000000003.npz"
    with zipfile.ZipFile(crafted, "w") as z:
        z.writestr("model/0.npy", header.getvalue() + bytes(12))
    before = tree(run)
    argv = ["eval", "--model", "resnet18", "--image-size", "32", "--num-classes", "4"]
    result = cvbench(*argv, "--synthetic", "--batch-size", "2", "--checkpoint", str(crafted))
    assert result.returncode == 1  # a bad input file (#37; it was 2)
    assert error_line(result) == (
        f"cvbench eval: error: {crafted} is not a valid checkpoint: member model/0.npy has a .npy "
        "header asking for shape (1099511627776,) of float32 (4.0 TiB), but holds 12 bytes "
        "of data"
    )
    assert tree(run) == before
    resumed = cvbench(*FLAGS, "--no-export", "--log-dir", str(run), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "skipping checkpoint: " in resumed.stderr
    assert f"resumed from {run / 'checkpoints' / 'ckpt-0000000002.npz'}" in resumed.stdout


@pytest.mark.slow
def test_a_log_cut_mid_line_is_repaired_by_the_resume(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path / "run")
    log = run / "train_log.jsonl"
    whole = log.read_bytes()
    log.write_bytes(whole + b'{"event": "step", "loss": 1.2')  # killed mid-write
    resumed = cvbench(*FLAGS, "--no-export", "--log-dir", str(run), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    data = log.read_bytes()
    assert data.startswith(whole)
    events = [json.loads(line) for line in data.decode().splitlines()]  # every line parses
    dropped = events[len(whole.splitlines())]
    assert dropped["event"] == "partial_line_dropped"
    assert (dropped["bytes"], dropped["text"]) == (29, '{"event": "step", "loss": 1.2')
    # then the resumed run: its recipe (every run has one), then its start
    resumed_events = events[len(whole.splitlines()) + 1 :]
    assert [e["event"] for e in resumed_events[:2]] == ["recipe", "start"]
