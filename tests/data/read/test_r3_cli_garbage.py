"""A record that is no `tf.train.Example` (a sound CRC: a writer's bug) seen by the real
`cvbench` process: one error line naming the file and the record and the `--skip-corrupt`
hint, exit status 1, no traceback and none of the record's bytes (before: TensorFlow's parse
error, `'utf-8' codec can't decode byte 0xff ...`, also under `--skip-corrupt`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cvbench.benchmark.input_bench import tfrecord_frame

CVBENCH = Path(sys.executable).with_name("cvbench")
ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1")


@pytest.mark.slow
def test_train_on_a_record_that_is_no_example_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "data").mkdir()  # the run folder beside the data, not in it
    path = tmp_path / "data" / "train-00000-of-00001"
    path.write_bytes(tfrecord_frame(b"\xff\xfe garbage"))
    argv = [
        "train", "--model", "resnet18", "--image-size", "32", "--num-classes", "4",
        "--batch-size", "1", "--epochs", "1", "--eval", "none", "--no-export",
        "--no-progress", "--log-every", "0", "--seed", "0", "--precision", "fp32",
        "--data-dir", str(tmp_path / "data"), "--log-dir", str(tmp_path / "run"),
    ]  # fmt: skip
    run = subprocess.run(
        [str(CVBENCH), *argv], capture_output=True, text=True, env=ENV, timeout=600
    )
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "codec" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"cvbench train: error: damaged record (record 0 of {path}): not a tf.train.Example; "
        "pass --skip-corrupt to skip corrupt records"
    )
