"""#37, causes B, F, G, I, K: the run folder never written through a link, outputs that never
replace an input or a file cvbench did not write, SIGTERM in every phase of a command, and
the messages of a dangling or empty `--log-dir`. The unit tests are fast; the command runs
(`slow`) start TensorFlow in a fresh process each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cvbench.training.export import remove_stale_export_staging as remove_stale_exports
from cvbench.training.run_dir import LOCK_NAME, RunDirectory, check_layout
from cvbench.training.run_log import RunLog, drop_partial_line
from cvbench.utils.errors import BadFileError
from cvbench.utils.io import HOST_TAG

ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
# The repro flags (F), without the evaluation.
F = [
    "--model", "resnet18", "--image-size", "32", "--num-classes", "4", "--synthetic",
    "--batch-size", "2", "--steps-per-epoch", "2", "--epochs", "1", "--eval", "none",
    "--no-progress", "--seed", "0", "--precision", "fp32",
]  # fmt: skip
#: Runs `cvbench.cli.main` with `module.name` wrapped to send this process SIGTERM (or the
#: signal $SIGNAL names) once the wrapped function has run (a signal landing in that exact
#: phase of the command).
SIGTERM_AFTER = """
import os, signal, sys, time, importlib
module, name = os.environ["SIGTERM_AFTER"].rsplit(".", 1)
module = importlib.import_module(module)
original = getattr(module, name)
def wrapped(*args, **kwargs):
    result = original(*args, **kwargs)
    os.kill(os.getpid(), getattr(signal, os.environ.get("SIGNAL", "SIGTERM")))
    time.sleep(60)
    return result
setattr(module, name, wrapped)
from cvbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def cvbench(*argv, cwd: Path, sigterm_after: str | None = None) -> subprocess.CompletedProcess:
    if sigterm_after is None:
        command = [sys.executable, "-m", "cvbench", *map(str, argv)]
        env = ENV
    else:
        command = [sys.executable, "-c", SIGTERM_AFTER, *map(str, argv)]
        env = dict(ENV, SIGTERM_AFTER=sigterm_after)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def lines(run: subprocess.CompletedProcess) -> list[str]:
    """The lines cvbench printed on stderr (TensorFlow's start-up notes aside); no traceback."""
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return [line for line in run.stderr.splitlines() if line.startswith("cvbench")]


def dead_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


# ---------------------------------------------------------------- B: the run folder, no links
@pytest.mark.backend_agnostic
def test_a_linked_lock_file_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_NAME).symlink_to("../victim.txt")
    with pytest.raises(BadFileError, match=r"run/\.cvbench-run\.lock is a symbolic link"):
        RunDirectory(tmp_path / "run").acquire(fresh=True)
    assert victim.read_text() == "the user's"


@pytest.mark.backend_agnostic
def test_a_linked_run_log_is_neither_cut_nor_appended_to(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"line one\nno newline")
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_log.jsonl").symlink_to(victim)
    with pytest.raises(BadFileError, match=r"train_log\.jsonl is a symbolic link"):
        check_layout(run)
    with pytest.raises(BadFileError, match=r"train_log\.jsonl is a symbolic link"):
        drop_partial_line(run / "train_log.jsonl")
    with pytest.raises(BadFileError, match=r"train_log\.jsonl is a symbolic link"):
        RunLog(run, enabled=True, progress_bar=False, tensorboard=False)
    assert victim.read_bytes() == b"line one\nno newline"


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("name", ["checkpoints", "export", "tensorboard"])
def test_a_linked_subfolder_of_the_run_is_refused(tmp_path, name):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / name).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BadFileError, match=rf"run/{name} is a symbolic link"):
        RunDirectory(tmp_path / "run").acquire(fresh=True)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert not (tmp_path / "run" / LOCK_NAME).exists()


@pytest.mark.backend_agnostic
def test_a_dangling_log_dir_link_is_named(tmp_path):
    (tmp_path / "run").symlink_to(tmp_path / "gone")
    with pytest.raises(BadFileError) as caught:
        RunDirectory(tmp_path / "run").acquire(fresh=True)
    assert str(caught.value) == (
        f"{tmp_path / 'run'} is a symbolic link to {tmp_path / 'gone'}, which does not exist: "
        "create its target or train in another log directory"
    )


@pytest.mark.backend_agnostic
def test_stale_export_staging_of_a_killed_process_is_removed(tmp_path):
    stale = tmp_path / f".export-{HOST_TAG}-{dead_pid()}-abc"
    live = tmp_path / f".export-{HOST_TAG}-{os.getpid()}-abc"
    (stale / "model").mkdir(parents=True)
    live.mkdir()
    # not ours to judge: no pid; another machine's or container's (a shared file system);
    # an older cvbench's naming without the host (it may be another machine's too)
    other_host = "0" * 8 if HOST_TAG != "0" * 8 else "1" * 8
    kept = [".export-notapid", f".export-{other_host}-{dead_pid()}-abc", f".export-{dead_pid()}-x"]
    for name in kept:
        (tmp_path / name).mkdir()
    assert remove_stale_exports(tmp_path) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, *kept])


# ------------------------------------------------------------------- I: --log-dir messages
def test_an_empty_log_dir_is_refused(tmp_path):
    run = cvbench("train", *F, "--log-dir", "", cwd=tmp_path)
    assert run.returncode == 2
    assert lines(run) == [
        "cvbench: error: --log-dir is empty: name the run folder (--log-dir . for this one)"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # builds the model in a fresh process (TensorFlow)
def test_the_command_refuses_a_linked_lock_and_a_dangling_log_dir(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_NAME).symlink_to("../victim.txt")
    (tmp_path / "dangling").symlink_to("gone")
    run = cvbench("train", *F, "--log-dir", "run", cwd=tmp_path)
    assert run.returncode == 1, run.stderr[-3000:]
    assert lines(run) == [
        "cvbench train: error: run/.cvbench-run.lock is a symbolic link; cvbench never writes "
        "through a link: remove it or choose another path"
    ]
    assert victim.read_text() == "the user's"
    run = cvbench("train", *F, "--log-dir", "dangling", cwd=tmp_path)
    assert run.returncode == 1, run.stderr[-3000:]
    assert lines(run) == [
        "cvbench train: error: dangling is a symbolic link to gone, which does not exist: "
        "create its target or train in another log directory"
    ]
    assert not (tmp_path / "gone").exists()


# ------------------------------------------------------------------ F: eval --json
def test_eval_json_never_replaces_the_checkpoint(tmp_path):
    ckpt = tmp_path / "run" / "ckpt-2.npz"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"the run's only checkpoint")
    run = cvbench("eval", *F[:7], "--checkpoint", ckpt, "--json", ckpt, cwd=tmp_path)
    assert run.returncode == 2
    assert lines(run) == [
        f"cvbench: error: {ckpt} is an input of this command ({ckpt}); it is never "
        "overwritten: write elsewhere"
    ]
    assert ckpt.read_bytes() == b"the run's only checkpoint"
    mine = tmp_path / "mine.json"
    mine.write_text("the user's")
    run = cvbench("eval", *F[:7], "--checkpoint", ckpt, "--json", mine, cwd=tmp_path)
    assert lines(run) == [
        f"cvbench: error: {mine} exists and was not written by cvbench; --json replaces only "
        "cvbench's own outputs: move it or write elsewhere"
    ]
    assert mine.read_text() == "the user's"


# ------------------------------------------------------- G: SIGTERM outside the epoch loop
@pytest.mark.slow  # trains in a fresh process (TensorFlow)
def test_sigterm_during_the_final_export_stops_with_one_line(tmp_path):
    run = cvbench(
        "train", *F, "--log-dir", "run", cwd=tmp_path,
        sigterm_after="cvbench.training.export._write_saved_model",
    )  # fmt: skip
    assert run.returncode == 143, run.stderr[-3000:]
    assert lines(run)[-1] == (
        "cvbench train: SIGTERM received: stopped; the checkpoints in run/checkpoints are "
        "kept (rerun with --resume to continue); nothing is left half-written"
    )
    export = tmp_path / "run" / "export"
    # model.keras and its info file (recorded in .cvbench-outputs.json) were complete before
    # the signal; no staging folder is left, nor a half-written keras_saved_model/.
    assert sorted(p.name for p in export.iterdir()) == [
        ".cvbench-outputs.json",
        "model.keras",
        "model_info.json",
    ]
    assert (tmp_path / "run" / "checkpoints").is_dir()
