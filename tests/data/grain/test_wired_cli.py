"""`cvbench train / eval` on the grain reader: a run with TensorFlow blocked on the JAX
backend (grain is then the default) that trains, evaluates every validation record once and
exports a model with the records' class names; `--data-backend grain` errors as one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cvbench.cli import main

pytestmark = pytest.mark.backend_agnostic

NAMES = ("circle", "cross", "diamond", "square", "star", "triangle")  # the shapes, sorted


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """`build-imagenet` records of the shapes set: 6 classes x 4 training images of 32 x 32
    (24 records), 1 validation image each (6 records), with dataset_info.json."""
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("wired_cli")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=4, val_per_class=1, seed=0
    )
    out = root / "records"
    build_imagenet(raw.path, out, train_shards=2, val_shards=1, num_workers=1, progress=False)
    return out


@pytest.mark.slow
def test_train_and_eval_on_jax_without_tensorflow_read_through_grain(records, tmp_path):
    from cvbench.utils.model_file import read_model_info

    blocker = tmp_path / "no_tf" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no TensorFlow here')\n")
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(blocker.parent))
    common = ["--model", "resnet18", "--image-size", "32", "--batch-size", "4", "--seed", "1"]
    common += ["--data-dir", str(records), "--precision", "fp32"]
    run_dir = tmp_path / "run"
    train = [sys.executable, "-m", "cvbench", "train", "--backend", "jax", *common]
    train += ["--epochs", "1", "--log-dir", str(run_dir), "--no-progress"]
    done = subprocess.run(train, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    # 24 records at batch 4: 6 steps; the evaluation covers the 6 validation records
    assert "6 steps per epoch" in done.stdout + done.stderr
    assert read_model_info(run_dir / "export" / "model.keras").class_names == NAMES
    evaluate = [sys.executable, "-m", "cvbench", "eval", *common, "--data-backend", "grain"]
    evaluate += ["--checkpoint", str(run_dir)]
    done = subprocess.run(evaluate, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line.split(":")[0] for line in done.stdout.splitlines()[-3:]] == [
        "loss",
        "top1",
        "top5",
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "resnet18", "--synthetic"], "--data-backend grain reads --data-dir records"),
        (["--model", "ssd320", "--data-dir", "."], "--data-backend grain is for classification"),
        (
            ["--model", "resnet18", "--data-dir", ".", "--dali-device", "mixed"],
            "--dali-device needs --data-backend dali",
        ),
    ],
    ids=["synthetic", "detection", "dali-device"],
)
def test_data_backend_grain_misuse_is_one_line_exit_2(argv, message, capsys):
    assert main(["train", *argv, "--data-backend", "grain"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
