"""A corrupt image seen by the real `cvbench` process: one error line naming the file and the
record, exit status 1, no traceback; `--skip-corrupt` goes on and counts it; `--debug` shows
the traceback (slow: subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from jpeg_records import write_jpeg_records

CVBENCH = Path(sys.executable).with_name("cvbench")
ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1")
FLAGS = [
    "train", "--model", "resnet18", "--image-size", "32", "--num-classes", "4",
    "--batch-size", "1", "--epochs", "1", "--eval", "none", "--no-export", "--no-progress",
    "--log-every", "0", "--seed", "0", "--precision", "fp32",
]  # fmt: skip


def _write(path: Path, count: int, corrupt: set[int]) -> None:
    """`count` records `img_<i>.JPEG` with labels 1..4 in turn; `corrupt` are no image."""
    write_jpeg_records(path, count, corrupt=corrupt)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """Training: one record, not an image (the first step meets it for sure); validation:
    4 records, record 1 not an image (evaluation reads each record once: an exact count)."""
    directory = tmp_path_factory.mktemp("corrupt")
    _write(directory / "train-00000-of-00001", 1, {0})
    _write(directory / "validation-00000-of-00001", 4, {1})
    return directory


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A run directory holding the checkpoint of one synthetic training step."""
    run = tmp_path_factory.mktemp("run")
    train = _run(*FLAGS, "--synthetic", "--steps-per-epoch", "1", "--log-dir", str(run))
    assert train.returncode == 0, train.stderr[-2000:]
    return run


def _run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CVBENCH), *argv], capture_output=True, text=True, env=env or ENV, timeout=600
    )


@pytest.mark.slow
def test_a_corrupt_image_is_one_line_and_exit_1(records):
    run = _run(*FLAGS, "--data-dir", str(records))
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "Graph execution error" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"cvbench train: error: undecodable image img_0.JPEG (record 0 of "
        f"{records}/train-00000-of-00001); pass --skip-corrupt to skip corrupt records"
    )


@pytest.mark.slow
def test_eval_skip_corrupt_evaluates_the_rest_and_counts(records, checkpoint):
    argv = ["eval", "--model", "resnet18", "--image-size", "32", "--num-classes", "4"]
    argv += ["--batch-size", "2", "--checkpoint", str(checkpoint), "--data-dir", str(records)]
    failed = _run(*argv)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert (
        failed.stderr.strip()
        .splitlines()[-1]
        .startswith("cvbench eval: error: undecodable image img_1.JPEG (record 1 of")
    )
    run = _run(*argv, "--skip-corrupt")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "cvbench: skipped 1 corrupt record (--skip-corrupt)" in run.stdout


@pytest.mark.slow
def test_debug_shows_the_traceback(records):
    run = _run("--debug", *FLAGS, "--data-dir", str(records))
    assert run.returncode != 0 and "Traceback (most recent call last)" in run.stderr
    assert "undecodable image img_0.JPEG (record 0 of" in run.stderr


@pytest.mark.slow
def test_labels_outside_num_classes_stop_with_one_line(tmp_path):
    # The fault: `cvbench train --num-classes 2` on 4-class records exited 0 with loss 0.715
    # (an out-of-range label one-hot encodes to zeros: loss 0). Record 2 holds label 3 of 1..4.
    _write(tmp_path / "train-00000-of-00001", 4, set())
    flags = [f if f != "4" else "2" for f in FLAGS]  # --num-classes 2
    run = _run(*flags, "--data-dir", str(tmp_path), "--batch-size", "4")
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("cvbench train: error: label 2 (stored as 3) is outside [0, 2) for ")
    assert line.endswith(f"image img_2.JPEG (record 2 of {tmp_path}/train-00000-of-00001)")
    assert "--num-classes 2" in line
