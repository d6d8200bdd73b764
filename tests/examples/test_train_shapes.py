"""examples/train_shapes.py: the whole flow (shapes -> TFRecords -> Trainer -> top-1), tiny.

The script runs in this process (its `main(argv)`), which spares starting TensorFlow again;
`test_script_runs_as_a_command` checks the command line itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_shapes.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("train_shapes_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_runs_as_a_command():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "--output-dir" in result.stdout and "--tiny" in result.stdout


def test_too_few_images_for_one_batch_is_an_error(tmp_path):
    # 6 classes x 2 images = 12 training images < one batch of 16: not one training step.
    argv = ["--output-dir", str(tmp_path), "--image-size", "32", "--train-per-class", "2"]
    with pytest.raises(ValueError, match="fewer training images than one batch of 16"):
        _load_script().main([*argv, "--val-per-class", "1", "--batch-size", "16"])
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.slow
def test_tiny_run_writes_metrics_and_logs(tmp_path, capsys):
    metrics = _load_script().main(["--output-dir", str(tmp_path), "--tiny"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    # --tiny: 6 classes x 4 validation images; one epoch at 32 px.
    assert metrics["val_images"] == 24
    assert 0.0 <= metrics["top1"] <= 1.0
    assert len(metrics["train_loss"]) == 1
    assert metrics["settings"]["image_size"] == 32
    assert f"top-1 {metrics['top1']:.3f} on 24 validation images" in capsys.readouterr().out

    # The real builder's shards: --tiny makes 6 x 16 = 96 training images in 4 shards.
    records = tmp_path / "data" / "records"
    assert len(list(records.glob("train-*-of-00004"))) == 4
    assert len(list(records.glob("validation-*-of-00002"))) == 2
    # 96 images / batch 16 = 6 steps; log_every = max(1, 6 // 4) = 1: a record per step.
    log = [json.loads(x) for x in (tmp_path / "logs" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["event"] == "step"] == [1, 2, 3, 4, 5, 6]
    assert list((tmp_path / "logs" / "checkpoints").glob("ckpt-*.npz"))
