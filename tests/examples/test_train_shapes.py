"""examples/train_shapes.py: the whole flow (shapes -> TFRecords -> Trainer -> top-1), tiny."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_shapes.py"


def _env() -> dict[str, str]:
    """This interpreter's environment, importing cvbench from this checkout."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_too_few_images_for_one_batch_is_an_error(tmp_path):
    # 6 classes x 2 images = 12 training images < one batch of 16: no training step.
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--output-dir",
            str(tmp_path / "out"),
            "--image-size",
            "32",
            "--train-per-class",
            "2",
            "--val-per-class",
            "1",
            "--batch-size",
            "16",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "fewer training images than one batch of 16" in result.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()


@pytest.mark.slow
def test_tiny_run_writes_metrics_and_logs(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--output-dir", str(out), "--tiny"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    # --tiny: 6 classes x 4 validation images; one epoch.
    assert metrics["val_images"] == 24
    assert 0.0 <= metrics["top1"] <= 1.0
    assert len(metrics["train_loss"]) == 1
    assert metrics["settings"]["image_size"] == 32
    assert f"top-1 {metrics['top1']:.3f} on 24 validation images" in result.stdout

    # The real builder's shards: --tiny makes 6 x 16 = 96 training images in 4 shards.
    records = out / "data" / "records"
    assert len(list(records.glob("train-*-of-00004"))) == 4
    assert len(list(records.glob("validation-*-of-00002"))) == 2
    # 96 images / batch 16 = 6 steps; log_every = max(1, 6 // 4) = 1: a record per step.
    log = [json.loads(x) for x in (out / "logs" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["event"] == "step"] == [1, 2, 3, 4, 5, 6]
    assert list((out / "logs" / "checkpoints").glob("ckpt-*.npz"))
