"""The CLI hides TensorFlow's C++ start-up messages unless the user set TF_CPP_MIN_LOG_LEVEL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from cvbench.cli import tf_startup
from cvbench.cli.tf_startup import LEVEL_VARIABLE, is_startup_noise, quiet_tensorflow_startup

# What TensorFlow 2.21 printed on stderr on every CLI call (a CPU machine), before the fix.
STARTUP_LINES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796125646.475549   18596 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors from "
    "different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "I0000 00:00:1796125646.475892   18596 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "I0000 00:00:1796125646.520817   18596 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 FMA, in other "
    "operations, rebuild TensorFlow with the appropriate compiler flags.",
    "E0000 00:00:1796125649.383293   18596 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
]
NOISE = re.compile(r"absl::InitializeLog|cuda drivers|cuInit|cudart_stub|^[IWE]\d{4} ", re.M)


def test_startup_lines_are_noise_and_other_lines_are_not():
    assert all(is_startup_noise(line + "\n") for line in STARTUP_LINES)
    kept = [
        "E0000 00:00:1796125649.383293   18596 bfc_allocator.cc:1] Allocator ran out of memory",
        "Traceback (most recent call last):",
        "UserWarning: a Python warning",
        "cvbench: error: --epochs must be >= 1, got 0",
    ]
    assert not any(is_startup_noise(line) for line in kept)


def test_filtered_stderr_drops_the_noise_and_writes_the_rest_back(capfd):
    with tf_startup._filtered_stderr():
        os.write(2, ("\n".join(STARTUP_LINES) + "\nkeep me\n").encode())
        os.write(2, b"E0000 00:00:1.5   7 x.cc:3] a real error\n")
    assert capfd.readouterr().err == "keep me\nE0000 00:00:1.5   7 x.cc:3] a real error\n"


def test_the_level_is_set_for_the_run_and_undone(monkeypatch):
    monkeypatch.delenv(LEVEL_VARIABLE, raising=False)
    with quiet_tensorflow_startup():
        assert os.environ[LEVEL_VARIABLE] == "2"
    assert LEVEL_VARIABLE not in os.environ
    assert not any(isinstance(f, tf_startup._QuietTensorFlowImport) for f in sys.meta_path)


@pytest.mark.parametrize("level", ["0", "3"])
def test_a_level_the_user_set_is_left_alone(monkeypatch, level):
    monkeypatch.setenv(LEVEL_VARIABLE, level)
    meta_path = list(sys.meta_path)
    with quiet_tensorflow_startup():
        assert os.environ[LEVEL_VARIABLE] == level and sys.meta_path == meta_path
    assert os.environ[LEVEL_VARIABLE] == level


def _import_tensorflow(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = textwrap.dedent(
        """
        import os, sys
        from cvbench.cli.tf_startup import quiet_tensorflow_startup
        with quiet_tensorflow_startup():
            import tensorflow as tf
            tf.constant(1.0) + 1.0  # a first op: the devices are set up
            print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"), type(tf.__loader__).__name__)
            print("python's own stderr", file=sys.stderr)
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )


def test_importing_tensorflow_under_the_filter_prints_no_startup_lines():
    env = {k: v for k, v in os.environ.items() if k != LEVEL_VARIABLE}
    out = _import_tensorflow(env)
    assert NOISE.search(out.stderr) is None, out.stderr
    assert "python's own stderr" in out.stderr
    # The level is set and TensorFlow keeps its own loader (the filter's is gone).
    assert out.stdout.split() == ["2", "SourceFileLoader"]


def test_with_the_users_level_tensorflow_prints_as_it_does():
    out = _import_tensorflow({**os.environ, LEVEL_VARIABLE: "0"})
    assert out.stdout.split()[0] == "0"
    # The messages are there: what the test above checks is hidden is not hidden here.
    assert NOISE.search(out.stderr) is not None, out.stderr


def test_a_cli_command_that_imports_tensorflow_prints_none_of_it(tmp_path):
    # Regression: every command started with TensorFlow's C++ noise (cuda drivers, cuInit).
    env = {k: v for k, v in os.environ.items() if k != LEVEL_VARIABLE}
    argv = ["train", "--model", "resnet18", "--synthetic", "--batch-size", "2"]
    argv += ["--image-size", "32", "--num-classes", "2", "--epochs", "1", "--precision", "fp32"]
    argv += ["--steps-per-epoch", "1", "--eval", "none", "--no-export", "--no-progress"]
    argv += ["--log-dir", str(tmp_path)]
    out = subprocess.run(
        [sys.executable, "-m", "cvbench", *argv], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "epoch 1: loss" in out.stdout
    assert NOISE.search(out.stderr) is None, out.stderr
