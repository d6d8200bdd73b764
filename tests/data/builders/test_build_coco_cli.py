"""Tests for `cvbench build-coco` (the thin command over build_coco_splits)."""

from __future__ import annotations

import argparse
import io
import json

import numpy as np
import pytest
from PIL import Image

from cvbench.cli import CLIError
from cvbench.cli import coco as coco_cli


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cvbench")
    coco_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def _coco_2017(root, splits=("train", "val")):
    """The COCO 2017 layout with two 32x24 images per split, one box each."""
    (root / "annotations").mkdir(parents=True)
    for split in splits:
        (root / f"{split}2017").mkdir()
        images, anns = [], []
        for image_id in (1, 2):
            buf = io.BytesIO()
            Image.fromarray(np.full((24, 32, 3), 99, np.uint8)).save(buf, "JPEG")
            (root / f"{split}2017" / f"{image_id:012d}.jpg").write_bytes(buf.getvalue())
            images.append(
                {"id": image_id, "file_name": f"{image_id:012d}.jpg", "height": 24, "width": 32}
            )
            anns.append(
                {"id": image_id, "image_id": image_id, "category_id": 18, "bbox": [1, 2, 10, 8],
                 "area": 80, "iscrowd": 0}
            )  # fmt: skip
        data = {"images": images, "annotations": anns, "categories": [{"id": 18, "name": "dog"}]}
        (root / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(data))
    return root


def test_coco_dir_builds_both_splits(tmp_path, capsys):
    root = _coco_2017(tmp_path / "coco")
    out = tmp_path / "out"
    argv = ["build-coco", str(out), "--coco-dir", str(root), "--workers", "1", "--no-progress"]
    assert _run(argv) == 0
    # Default 100 / 10 shards, lowered to the 2 images of each split.
    names = sorted(p.name for p in out.glob("coco_*.record-*"))
    assert names == [
        "coco_train.record-00000-of-00002", "coco_train.record-00001-of-00002",
        "coco_val.record-00000-of-00002", "coco_val.record-00001-of-00002",
    ]  # fmt: skip
    printed = capsys.readouterr().out
    assert "train: 2 images, 2 annotations: 2 boxes kept" in printed
    # A rerun finds every shard complete and writes nothing.
    assert _run(argv) == 0
    assert "0 written now, 2 kept from an earlier run" in capsys.readouterr().out


def test_single_annotation_file_and_shard_count(tmp_path):
    root = _coco_2017(tmp_path / "coco", splits=("val",))
    out = tmp_path / "out"
    argv = [
        "build-coco", str(out), "--annotations", str(root / "annotations/instances_val2017.json"),
        "--images", str(root / "val2017"), "--split", "mini", "--num-shards", "1",
        "--workers", "1", "--no-progress",
    ]  # fmt: skip
    assert _run(argv) == 0
    assert [p.name for p in out.glob("coco_mini.record-*")] == ["coco_mini.record-00000-of-00001"]


def test_user_errors_are_cli_errors(tmp_path):
    root = _coco_2017(tmp_path / "coco", splits=("val",))
    out = str(tmp_path / "out")
    with pytest.raises(CLIError, match="train2017"):
        _run(["build-coco", out, "--coco-dir", str(root)])  # no train split there
    with pytest.raises(CLIError, match="--images"):
        _run(["build-coco", out, "--annotations", str(root / "x.json")])
    with pytest.raises(CLIError, match="no such file"):
        _run(["build-coco", out, "--annotations", str(root / "x.json"), "--images", str(root),
              "--split", "val"])  # fmt: skip
    with pytest.raises(CLIError, match="quality"):
        _run(["build-coco", out, "--coco-dir", str(root), "--splits", "val", "--quality", "101"])
    with pytest.raises(SystemExit):  # argparse: the two sources are exclusive
        _run(["build-coco", out, "--coco-dir", str(root), "--annotations", "a.json"])
