"""The run directory at the Python API: a fresh run into a folder holding a run is refused, a
second run into a folder in use is refused, the lock goes with its holder, and the folder's
layout is checked before anything is written."""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from training_helpers import blobs, sparse_ce, tiny_mlp

from cvbench.training import TrainConfig, Trainer
from cvbench.training.run_dir import LOCK_NAME, RunDirectory, RunDirInUseError, existing_run

pytestmark = pytest.mark.backend_agnostic


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` by relative path, with its SHA-256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def trainer(log_dir, **config):
    return Trainer(
        tiny_mlp,
        sparse_ce(),
        schedule=0.1,
        precision="float32",
        distribution="single",
        config=TrainConfig(log_dir=str(log_dir), log_every=0, progress_bar=False, seed=0, **config),
    )


@pytest.fixture
def finished_run(tmp_path):
    """A run folder with checkpoints, train_log.jsonl and export/ (2 steps of 8 rows)."""
    run = tmp_path / "run"
    trainer(run, export=True).fit(blobs(16), epochs=1, batch_size=8)
    return run


def test_a_fresh_run_into_a_folder_holding_a_run_is_refused_and_changes_nothing(finished_run):
    before = tree(finished_run)
    with pytest.raises(ValueError) as e:
        trainer(finished_run, export=False).fit(blobs(16), epochs=1, batch_size=8)
    assert str(e.value) == (
        f"{finished_run} already holds a run (checkpoints/ckpt-0000000002.npz, "
        "train_log.jsonl, export/): rerun with resume=True to continue it, or train in "
        "another log directory"
    )
    assert tree(finished_run) == before


def test_a_resume_and_a_second_fit_of_the_same_trainer_go_on(finished_run):
    resumed = trainer(finished_run, resume=True, export=False)
    resumed.fit(blobs(16), epochs=1, batch_size=8)
    assert resumed.state["step"] == 2  # the run was complete: nothing more to train
    resumed.fit(blobs(16), epochs=2, batch_size=8)  # the same Trainer carries on
    assert resumed.state["step"] == 4


@pytest.mark.parametrize("contents", ["absent", "empty", "unrelated files"])
def test_a_folder_without_a_run_is_fine(tmp_path, contents):
    run = tmp_path / "run"
    if contents != "absent":
        run.mkdir()
    if contents == "unrelated files":
        (run / "notes.txt").write_text("mine")
        (run / "checkpoints").mkdir()  # no ckpt-* in it
    trainer(run, export=False).fit(blobs(16), epochs=1, batch_size=8)
    assert (run / "checkpoints" / "ckpt-0000000002.npz").is_file()
    if contents == "unrelated files":
        assert (run / "notes.txt").read_text() == "mine"


def test_what_makes_a_run(tmp_path):
    assert existing_run(tmp_path / "absent") == []
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-0000000001.npz").write_bytes(b"")
    (tmp_path / "checkpoints" / "ckpt-0000000003.npz").write_bytes(b"")
    (tmp_path / "export").mkdir()
    (tmp_path / LOCK_NAME).write_text("")  # the lock file alone is no run
    assert existing_run(tmp_path) == ["checkpoints/ckpt-0000000003.npz", "export/"]


HOLDER = textwrap.dedent(
    """
    import sys, time
    from cvbench.training.run_dir import RunDirectory
    RunDirectory(sys.argv[1]).acquire(fresh=True)
    print("held", flush=True)
    time.sleep(600)
    """
)


def test_a_folder_in_use_is_refused_naming_the_holder_until_it_ends(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        before = tree(run)
        with pytest.raises(RunDirInUseError) as e:
            trainer(run, resume=True).fit(blobs(16), epochs=1, batch_size=8)
        message = str(e.value)
        assert message.startswith(
            f"{run} is in use by another training run (pid {holder.pid} on host "
            f"{socket.gethostname()} since "
        )
        assert message.endswith("): wait for it to end, or train in another log directory")
        assert e.value.errno == errno.EBUSY and isinstance(e.value, OSError)
        assert tree(run) == before
    finally:
        holder.kill()  # SIGKILL: the kernel lets the lock go
        holder.wait(30)
    trainer(run, resume=True, export=False).fit(blobs(16), epochs=1, batch_size=8)
    assert (run / "checkpoints" / "ckpt-0000000002.npz").is_file()


def test_the_lock_is_held_during_fit_and_let_go_after_it(tmp_path):
    run = tmp_path / "run"
    t = trainer(run, export=False)
    original, seen = t.save_checkpoint, []

    def save_checkpoint():  # a second claim while the Trainer writes its checkpoint
        with pytest.raises(RunDirInUseError):
            RunDirectory(run).acquire(fresh=False)
        seen.append(t.state["step"])
        return original()

    t.save_checkpoint = save_checkpoint
    t.fit(blobs(16), epochs=1, batch_size=8)
    assert seen == [2]
    other = RunDirectory(run)
    other.acquire(fresh=False)  # free again after fit
    other.release()


def test_a_failed_fit_lets_the_lock_go(tmp_path):
    run = tmp_path / "run"
    t = trainer(run, export=False)
    with pytest.raises(ValueError, match="epochs must be a positive int"):
        t.fit(blobs(16), epochs=0, batch_size=8)
    other = RunDirectory(run)
    other.acquire(fresh=True)
    other.release()


def test_a_refused_claim_is_checked_again_next_time(finished_run):
    t = trainer(finished_run, export=False)
    for _ in range(2):  # a refusal does not make the folder this Trainer's run
        with pytest.raises(ValueError, match="already holds a run"):
            t.fit(blobs(16), epochs=1, batch_size=8)


@pytest.mark.parametrize(
    "layout, path, reason",
    [
        ("log dir is a file", "", "not a directory (the run's log dir)"),
        ("checkpoints is a file", "checkpoints", "not a directory (the run writes one)"),
        ("train_log.jsonl is a folder", "train_log.jsonl", "a directory (the run writes a file)"),
    ],
)
def test_a_folder_of_the_wrong_kind_is_an_os_error_naming_it(tmp_path, layout, path, reason):
    run = tmp_path / "run"
    if layout == "log dir is a file":
        run.write_text("x")
    elif layout.endswith("folder"):
        (run / path).mkdir(parents=True)
    else:
        run.mkdir()
        (run / path).write_text("x")
    before = tree(tmp_path)
    with pytest.raises(OSError) as e:
        trainer(run, resume=True).fit(blobs(16), epochs=1, batch_size=8)
    assert (e.value.filename, e.value.strerror) == (run / path, reason)
    assert tree(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["run"]
