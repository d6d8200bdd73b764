"""examples/train_imagenet.py end to end on tiny ImageNet-format TFRecords the test builds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_imagenet.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("train_imagenet_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """6 classes x 4 training and 1 validation image of 32 px, as ImageNet TFRecords."""
    from cvbench.data.builders.imagenet_builder import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("imagenet")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=4, val_per_class=1, seed=3
    )
    build_imagenet(
        raw.path, root / "records", train_shards=2, val_shards=1, num_workers=1, progress=False
    )
    return root / "records"


@pytest.mark.slow
def test_script_trains_evaluates_and_exports(records, tmp_path, capsys):
    log_dir = tmp_path / "run"
    results = _load_script().main(
        [
            "--model",
            "resnet18",
            "--data-dir",
            str(records),
            "--precision",
            "fp32",
            "--image-size",
            "32",
            "--num-classes",
            "6",
            "--batch-size",
            "8",
            "--epochs",
            "1",
            "--log-dir",
            str(log_dir),
        ]
    )
    # Top-1 and top-5 over the 6 validation images: multiples of 1/6, top-5 >= top-1.
    for name in ("top1", "top5"):
        assert results[name] * 6 == pytest.approx(round(results[name] * 6), abs=1e-5)
    assert 0.0 <= results["top1"] <= results["top5"] <= 1.0
    assert f"top-1 {results['top1']:.4f}  top-5 {results['top5']:.4f}" in capsys.readouterr().out

    # 24 training images / batch 8 = 3 steps in the one epoch.
    log = [json.loads(x) for x in (log_dir / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["event"] == "epoch"] == [3]
    assert (log_dir / "export" / "model.keras").is_file()


def test_script_refuses_a_model_the_registry_lacks(records):
    with pytest.raises(ValueError, match="unknown model 'resnet7'; known: inception_v3, resnet101"):
        _load_script().main(["--model", "resnet7", "--data-dir", str(records)])
