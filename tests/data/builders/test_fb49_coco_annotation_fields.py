"""An annotation's ids, bbox, area and `iscrowd` are read strictly (probe fb49 #1): a lax
cast read `"iscrowd": "0"` as a crowd box, `image_id` 1.9 as image 1 and `category_id` 1.5 or
`true` as category 1, with exit 0 and no word. They are malformed annotations now, skipped and
counted; an id that is a float with no fraction (`1.0`) is an id, as for images and
categories (`coco_annotations.coco_integer`, the one rule for a COCO id)."""

from __future__ import annotations

import argparse
import io
import json

import numpy as np
import pytest
from PIL import Image

from cvbench.cli import coco as coco_cli
from cvbench.data.builders import coco_annotations as ca

_IMAGES = [
    {"id": 1, "file_name": "0.jpg", "width": 64, "height": 64},
    {"id": 2, "file_name": "1.jpg", "width": 64, "height": 64},
]
_GOOD = {"id": 9, "image_id": 1, "category_id": 1, "bbox": [5, 5, 20, 20], "area": 400}


def _parse(**fields):
    annotation = {**_GOOD, **fields}
    data = {"images": _IMAGES, "categories": [{"id": 1, "name": "thing"}], "annotations": []}
    data["annotations"] = [annotation]
    return ca.parse_coco_annotations(data)


@pytest.mark.parametrize(
    "fields",
    [
        {"image_id": 1.9},  # was image 1
        {"image_id": "1"},
        {"image_id": True},  # was image 1
        {"image_id": None},
        {"category_id": 1.5},  # was category 1
        {"category_id": True},
        {"category_id": "1"},
        {"iscrowd": "0"},  # was a crowd box (bool("0") is True)
        {"iscrowd": "false"},
        {"iscrowd": 2},
        {"iscrowd": 0.5},
        {"iscrowd": None},
        {"bbox": ["5", 5, 20, 20]},  # was 5.0
        {"bbox": [True, 5, 20, 20]},
        {"bbox": [5, 5, 20, float("nan")]},
        {"bbox": {"x": 5}},
        {"area": "400"},
        {"area": float("inf")},
        {"area": True},
    ],
    ids=repr,
)
def test_a_field_that_is_not_what_coco_says_makes_the_annotation_malformed(fields):
    images, report = _parse(**fields)
    assert report.skipped == {"malformed": 1} and report.examples["malformed"] == [9]
    assert report.num_boxes == 0 and images[0].objects == () and images[1].objects == ()


@pytest.mark.parametrize(
    ("fields", "crowd"),
    [
        ({}, False),  # no iscrowd: 0
        ({"iscrowd": 0}, False),
        ({"iscrowd": 1}, True),
        ({"iscrowd": False}, False),
        ({"iscrowd": True}, True),
        ({"iscrowd": 1.0}, True),  # a whole float, as ids
        ({"image_id": 1.0, "category_id": 1.0}, False),  # exporters that write 1.0
    ],
    ids=repr,
)
def test_well_formed_fields_are_kept_with_their_value(fields, crowd):
    images, report = _parse(**fields)
    assert report.skipped == {} and report.num_boxes == 1
    (obj,) = images[0].objects
    # bbox [x=5, y=5, w=20, h=20] on 64x64 -> [5/64, 5/64, 25/64, 25/64]
    assert obj.is_crowd is crowd and obj.category_id == 1 and type(obj.category_id) is int
    assert obj.box == (5 / 64, 5 / 64, 25 / 64, 25 / 64) and obj.area == 400.0


def test_a_missing_area_is_the_box_area():
    annotation = {k: v for k, v in _GOOD.items() if k != "area"}
    images, _ = ca.parse_coco_annotations(
        {"images": _IMAGES, "categories": [{"id": 1}], "annotations": [annotation]}
    )
    assert images[0].objects[0].area == 400.0  # w * h = 20 * 20


def test_build_coco_counts_the_probe_annotations_as_malformed(tmp_path, capsys):
    """The probe's file: its two annotations were a crowd box and a box on image 1."""
    (tmp_path / "img").mkdir()
    for name in ("0.jpg", "1.jpg"):
        buf = io.BytesIO()
        Image.fromarray(np.full((64, 64, 3), 99, np.uint8)).save(buf, "JPEG")
        (tmp_path / "img" / name).write_bytes(buf.getvalue())
    anns = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [5, 5, 20, 20], "area": 400,
         "iscrowd": "0"},
        {"id": 2, "image_id": 1.9, "category_id": 1, "bbox": [30, 30, 10, 10], "area": 400,
         "iscrowd": 0},
    ]  # fmt: skip
    data = {"images": _IMAGES, "annotations": anns, "categories": [{"id": 1, "name": "thing"}]}
    (tmp_path / "strcrowd.json").write_text(json.dumps(data))
    parser = argparse.ArgumentParser(prog="cvbench")
    coco_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["build-coco", "--annotations", str(tmp_path / "strcrowd.json"), "--images",
         str(tmp_path / "img"), "--split", "val", "--num-shards", "1", "--workers", "1",
         "--no-progress", str(tmp_path / "cx_sc")]
    )  # fmt: skip
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "2 images, 2 annotations: 0 boxes kept, 2 images without boxes" in printed
    assert "skipped 2 annotations (malformed), e.g. ids [1, 2]" in printed
