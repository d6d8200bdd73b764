"""Where `import tensorflow` fails (the JAX + grain set-up of docs/data.md), a command that
needs TensorFlow says so in one line, exit 1 (probe p50 #14: build-imagenet, build-coco,
`eval --data-backend tf` and bench-input ended in a traceback, and build-imagenet left a
`cvbench_manifest.json`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from grain_runs import tensorflow_blocker
from PIL import Image

CVBENCH = [sys.executable, "-m", "cvbench"]
WHY = "needs TensorFlow, which cannot be imported here (no TensorFlow): install tensorflow"


def _raw(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in ("cat", "dog"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(2):
                pixels = rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{name}_{i}.JPEG")
    return root


def _run(argv, tmp_path):
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(tensorflow_blocker(tmp_path / "b")))
    return subprocess.run([*CVBENCH, *argv], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.backend_agnostic
def test_build_imagenet_without_tensorflow_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "rec"
    argv = ["build-imagenet", "--raw-dir", str(_raw(tmp_path / "raw")), "--output-dir", str(out)]
    run = _run([*argv, "--train-shards", "1", "--val-shards", "1", "--workers", "1"], tmp_path)
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == (
        f"cvbench build-imagenet: error: writing TFRecords {WHY}, or on the JAX backend read "
        "the records with --data-backend grain"
    )
    assert not out.exists() or list(out.iterdir()) == []  # no manifest, no shard


@pytest.mark.backend_agnostic
def test_a_path_that_imports_tensorflow_unannounced_is_one_line(tmp_path):
    # the command's mapping of any failed `import tensorflow`: bench-input measures tf.data
    # (its baseline) beside grain, on records built here where TensorFlow imports
    from cvbench.cli import main

    raw, rec = _raw(tmp_path / "raw"), tmp_path / "rec"
    build = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(rec), "--workers", "1"]
    assert main([*build, "--train-shards", "1", "--val-shards", "1", "--no-progress"]) == 0
    argv = ["bench-input", "--data-dir", str(rec), "--batch-size", "2", "--image-size", "16"]
    run = _run([*argv, "--batches", "1", "--rounds", "1", "--data-backend", "grain"], tmp_path)
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    (line,) = run.stderr.strip().splitlines()[-1:]
    assert line.startswith("cvbench bench-input: error: this command " + WHY), line
