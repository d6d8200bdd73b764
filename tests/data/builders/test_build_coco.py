"""Tests for the COCO TFRecord builder on a tiny COCO-format data set written here."""

from __future__ import annotations

import hashlib
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cvbench.data import coco_schema as keys
from cvbench.data.builders import coco_annotations as ca
from cvbench.data.builders import coco_builder as bc
from cvbench.data.builders.manifest import MANIFEST_NAME
from cvbench.data.read import coco
from cvbench.utils.errors import BadFileError

H, W = 48, 64


def _save(path, value: int, *, fmt: str = "JPEG", mode: str = "RGB", size=(H, W)) -> bytes:
    pixels = np.full((*size, 3), value, np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    buf = io.BytesIO()
    image.save(buf, fmt, quality=95) if fmt == "JPEG" else image.save(buf, fmt)
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def _dataset(root, *, extra_annotation: dict | None = None):
    """Six images, annotations covering every rule; returns (json path, image dir, bytes)."""
    images_dir = root / "images"
    images_dir.mkdir(parents=True)
    raw = {
        1: _save(images_dir / "a.jpg", 50),
        2: _save(images_dir / "b.jpg", 90),  # no boxes at all
        3: _save(images_dir / "c.jpg", 130, mode="L"),  # grayscale JPEG: kept byte for byte
        4: _save(images_dir / "d.jpg", 170, fmt="PNG"),  # a PNG behind a .jpg name
        5: _save(images_dir / "e.jpg", 210, size=(W, H)),  # 64x48 while the JSON says 48x64
    }
    (images_dir / "f.jpg").write_bytes(raw[1][:200])  # truncated JPEG
    images = [
        {"id": i, "file_name": n, "height": H, "width": W}
        for i, n in [(1, "a.jpg"), (2, "b.jpg"), (3, "c.jpg"), (4, "d.jpg"), (5, "e.jpg")]
    ]
    images += [
        {"id": 6, "file_name": "f.jpg", "height": H, "width": W},
        {"id": 7, "file_name": "missing.jpg", "height": H, "width": W},
    ]
    anns = [
        # image 1: a person [x=8, y=12, w=32, h=24] -> [ymin, xmin, ymax, xmax] =
        # [12/48, 8/64, 36/48, 40/64] = [0.25, 0.125, 0.75, 0.625]; and a crowd car.
        {"id": 10, "image_id": 1, "category_id": 1, "bbox": [8, 12, 32, 24], "area": 700.5},
        {"id": 11, "image_id": 1, "category_id": 3, "bbox": [0, 0, 64, 48], "area": 3072,
         "iscrowd": 1},
        {"id": 12, "image_id": 1, "category_id": 1, "bbox": [5, 5, 0, 10], "area": 0},  # w = 0
        {"id": 13, "image_id": 1, "category_id": 1, "bbox": [40, 5, 30, 10], "area": 1},  # 70 > 64
        {"id": 14, "image_id": 3, "category_id": 12, "bbox": [1, 1, 5, 5], "area": 25},  # unknown
        {"id": 15, "image_id": 99, "category_id": 1, "bbox": [1, 1, 5, 5], "area": 25},  # no image
        {"id": 16, "image_id": 3, "category_id": 90, "bbox": [0, 0, 64, 48], "area": 3072},
        {"id": 17, "image_id": 4, "category_id": 3, "bbox": [1, 2, "x", 4], "area": 1},  # malformed
        {"id": 18, "image_id": 4, "category_id": 3, "bbox": [16, 0, 32, 48], "area": 1536},
        {"id": 19, "image_id": 3, "category_id": 1, "bbox": [-1, 0, 10, 10], "area": 100},  # x < 0
    ]  # fmt: skip
    if extra_annotation:
        anns.append(extra_annotation)
    cats = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 90, "name": "toothbrush"}]
    path = root / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return path, images_dir, raw


def _records(path) -> list[tf.train.Example]:
    return [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(path))]


def _feature(ex: tf.train.Example, key: str) -> list:
    f = ex.features.feature[key]
    return list(getattr(f, f.WhichOneof("kind")).value)


def test_parse_counts_every_rule(tmp_path):
    path, _, _ = _dataset(tmp_path)
    images, report = ca.load_coco_annotations(path)
    assert [im.image_id for im in images] == [1, 2, 3, 4, 5, 6, 7]
    assert report.num_images == 7 and report.num_annotations == 10
    assert dict(report.skipped) == {
        "zero_size": 1,
        "outside_image": 2,  # ids 13 (x + w > width) and 19 (x < 0)
        "unknown_category": 1,
        "unknown_image": 1,
        "malformed": 1,
    }
    assert report.examples["outside_image"] == [13, 19]
    # Kept: 10, 11 (image 1), 16 (image 3), 18 (image 4).
    assert report.num_boxes == 4
    # Images 2, 5, 6, 7 have no kept box.
    assert report.images_without_boxes == 4
    person, crowd_car = images[0].objects
    assert person.box == (0.25, 0.125, 0.75, 0.625)
    assert (person.category_id, person.category_name, person.is_crowd, person.area) == (
        1, "person", False, 700.5,
    )  # fmt: skip
    assert crowd_car.is_crowd and crowd_car.box == (0.0, 0.0, 1.0, 1.0)
    assert "skipped 2 annotations (outside_image), e.g. ids [13, 19]" in report.summary()


def test_parse_rejects_broken_files(tmp_path):
    with pytest.raises(ValueError, match="no 'images' list"):
        ca.parse_coco_annotations({"annotations": []})
    with pytest.raises(ValueError, match="duplicate image id 1"):
        ca.parse_coco_annotations(
            {"images": [{"id": 1, "file_name": "a", "height": 1, "width": 1}] * 2}
        )
    with pytest.raises(ValueError, match=r"images\[0\]: no 'height', 'width' in \{"):
        ca.parse_coco_annotations({"images": [{"id": 1, "file_name": "a"}]})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BadFileError, match="bad.json is not valid JSON"):
        ca.load_coco_annotations(bad)


_IMAGE = {"id": 1, "file_name": "a.jpg", "height": 4, "width": 4}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"categories": None}, "'categories' must be a list, got null"),
        ({"annotations": {"id": 1}}, "'annotations' must be a list, got {\"id\": 1}"),
        ({"categories": [{"name": "x"}]}, 'categories[0]: no \'id\' in {"name": "x"}'),
        ({"categories": ["cat"]}, "categories[0]: expected an object with an 'id', got \"cat\""),
        (
            {"categories": [{"id": 1}, {"id": 10**9}]},
            "categories[1]: category id 1000000000 is not an integer in 1..10000 (the largest "
            "id sets a detector's width: its class index is id - 1); renumber the categories",
        ),
        ({"categories": [{"id": 0}]}, "categories[0]: category id 0 is not an integer in 1.."),
        ({"categories": [{"id": 2.5}]}, "categories[0]: category id 2.5 is not an integer in"),
        ({"categories": [{"id": "7"}]}, 'categories[0]: category id "7" is not an integer in'),
        ({"categories": [{"id": True}]}, "categories[0]: category id true is not an integer in"),
        ({"categories": [{"id": 3}, {"id": 3}]}, "categories[1]: duplicate category id 3"),
        # a JSON escape of half a surrogate pair: no UTF-8 text (stop 50: refused only when the
        # records were encoded, after the manifest was written, without naming the file)
        (
            {"categories": [{"id": 1, "name": "bad\udc80"}]},
            "categories[0]: the name 'bad\\udc80' is not valid UTF-8",
        ),
        ({"images": [{"file_name": "a.jpg"}]}, "images[0]: no 'id', 'height', 'width' in"),
        ({"images": [None]}, "images[0]: expected an image object, got null"),
        ({"images": [{**_IMAGE, "id": "x"}]}, 'images[0]: image id "x" is not an integer'),
        # probe p50 #1: ids evaluation cannot carry exactly (2**53 + 1 came back as 2**53)
        # or that overflow the records' int64 (read back as an "undecodable image")
        (
            {"images": [{**_IMAGE, "id": 2**53 + 1}]},
            "images[0]: image id 9007199254740993 is not an integer of at most 2**53 - 1",
        ),
        (
            {"images": [{**_IMAGE, "id": 10**23}]},
            "images[0]: image id 100000000000000000000000 is not an integer of at most",
        ),
        ({"images": [{**_IMAGE, "height": 0}]}, "images[0] (id 1): size 0x4 is not two positive"),
        (
            {"images": [{**_IMAGE, "file_name": "../../etc/passwd"}]},
            'images[0] (id 1): file_name "../../etc/passwd" is not a relative path inside '
            "the image folder",
        ),
        (
            {"images": [{**_IMAGE, "file_name": "/etc/passwd"}]},
            'images[0] (id 1): file_name "/etc/passwd" is not a relative path',
        ),
        ({"images": [{**_IMAGE, "file_name": 7}]}, "images[0] (id 1): file_name 7 is not a"),
        # probe p50 #6: two boxes with one id; pycocotools kept one (perfect detections AP 0.25)
        (
            {
                "annotations": [
                    {"id": 7, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2]},
                    {"id": 7.0, "image_id": 1, "category_id": 1, "bbox": [1, 1, 2, 2]},
                ]
            },
            "annotations[1]: duplicate annotation id 7",
        ),  # fmt: skip
    ],
)
def test_a_malformed_file_is_refused_naming_the_file_and_the_entry(tmp_path, change, message):
    data = {"images": [_IMAGE], "annotations": [], "categories": [{"id": 1}], **change}
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadFileError) as caught:
        ca.load_coco_annotations(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_a_category_name_that_is_not_text_is_refused_before_anything_is_written(tmp_path):
    path, images, _ = _dataset(tmp_path)
    data = json.loads(path.read_text())
    data["categories"][1]["name"] = "car\udcff"
    path.write_text(json.dumps(data))  # "\\udcff" in the file
    out = tmp_path / "out"
    with pytest.raises(BadFileError, match=r"categories\[1\]: the name 'car\\udcff' is not"):
        bc.build_coco_splits(out, {"val": (path, images)}, num_workers=1, progress=False)
    assert not out.exists()  # before: a manifest and an encoding error naming no file


def test_a_bbox_that_is_not_four_numbers_is_skipped_and_counted():
    data = {"images": [_IMAGE], "categories": [{"id": 1}]}
    data["annotations"] = [
        {"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 2]},
        {"id": 6, "image_id": 1, "category_id": 1, "bbox": None},
        {"id": 7, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2]},
    ]
    images, report = ca.parse_coco_annotations(data)
    assert report.skipped["malformed"] == 2 and report.examples["malformed"] == [5, 6]
    assert len(images[0].objects) == 1


def test_build_writes_od_api_records_and_skips_bad_images(tmp_path):
    path, images_dir, raw = _dataset(tmp_path)
    out = tmp_path / "out"
    summary = bc.build_coco(
        path, images_dir, out, split="val", num_shards=2, num_workers=2, progress=False
    )
    names = sorted(n for n in os.listdir(out) if not n.startswith("."))
    assert names == [
        "coco_val.record-00000-of-00002", "coco_val.record-00001-of-00002", MANIFEST_NAME,
        "dataset_info.json",  # the categories (tests/data/test_dataset_info.py)
        "instances_val.json",  # the ground truth travels with the records
    ]  # fmt: skip
    assert (out / "instances_val.json").read_bytes() == path.read_bytes()
    skipped = {s.item: s.reason for s in summary.write.skipped}
    assert set(skipped) == {"e.jpg (id 5)", "f.jpg (id 6)", "missing.jpg (id 7)"}
    assert "48x64" in skipped["e.jpg (id 5)"] and "cannot read" in skipped["missing.jpg (id 7)"]
    assert summary.write.splits["val"].num_records == 4
    assert "4 boxes kept" in summary.format()

    examples = _records(out / names[0]) + _records(out / names[1])
    by_id = {int(_feature(ex, keys.SOURCE_ID)[0]): ex for ex in examples}
    assert sorted(by_id) == [1, 2, 3, 4]  # the annotation file's order, 7 images in 2 shards
    expected_keys = {
        "image/height", "image/width", "image/filename", "image/source_id", "image/key/sha256",
        "image/encoded", "image/format", "image/object/bbox/xmin", "image/object/bbox/xmax",
        "image/object/bbox/ymin", "image/object/bbox/ymax", "image/object/class/text",
        "image/object/class/label", "image/object/is_crowd", "image/object/area",
    }  # fmt: skip
    assert all(set(ex.features.feature) == expected_keys for ex in examples)
    one = by_id[1]
    assert _feature(one, keys.CLASS_LABEL) == [1, 3]  # COCO ids, not indices
    assert _feature(one, keys.CLASS_TEXT) == [b"person", b"car"]
    assert _feature(one, keys.IS_CROWD) == [0, 1]
    np.testing.assert_allclose(_feature(one, keys.AREA), [700.5, 3072])
    np.testing.assert_allclose(_feature(one, keys.BBOX_YMIN), [0.25, 0.0])
    np.testing.assert_allclose(_feature(one, keys.BBOX_XMAX), [0.625, 1.0])
    assert _feature(one, keys.HEIGHT) == [H] and _feature(one, keys.WIDTH) == [W]
    assert _feature(one, keys.FILENAME) == [b"a.jpg"] and _feature(one, keys.FORMAT) == [b"jpeg"]
    encoded = _feature(one, keys.ENCODED)[0]
    assert encoded == raw[1]  # the original JPEG bytes
    assert _feature(one, keys.KEY_SHA256) == [hashlib.sha256(encoded).hexdigest().encode()]
    assert _feature(by_id[2], keys.CLASS_LABEL) == []  # an image without boxes is kept
    assert _feature(by_id[3], keys.ENCODED)[0] == raw[3]  # grayscale JPEG kept as is
    png = _feature(by_id[4], keys.ENCODED)[0]
    assert png[:2] == b"\xff\xd8" and png != raw[4]  # the PNG was re-encoded as JPEG

    # The reader sees the same: every image once, original sizes, COCO ids -> indices.
    ids = []
    for _, meta in coco.coco_dataset(out, "val", batch_size=3, image_size=64, training=False):
        ids += meta["image_id"].numpy()[meta["valid"].numpy()].tolist()
    assert sorted(ids) == [1, 2, 3, 4]


def test_resume_rewrites_only_the_deleted_shard(tmp_path):
    path, images_dir, _ = _dataset(tmp_path)
    out = tmp_path / "out"
    kwargs = dict(split="train", num_shards=3, num_workers=1, progress=False)
    bc.build_coco(path, images_dir, out, **kwargs)
    shards = sorted(out.glob("coco_train.record-*-of-00003"))
    assert len(shards) == 3
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in shards}
    shards[1].unlink()
    summary = bc.build_coco(path, images_dir, out, **kwargs)
    assert summary.write.splits["train"].shards_written == 1
    assert summary.write.splits["train"].shards_reused == 2
    for p in shards:
        mtime, data = before[p.name]
        assert p.read_bytes() == data  # the training shuffle has a fixed seed
        if p != shards[1]:
            assert p.stat().st_mtime_ns == mtime  # untouched
    # Skips found by the first run are still reported when their shard is reused.
    assert len(summary.write.skipped) == 3


def test_a_different_data_set_is_refused_unless_overwrite(tmp_path):
    path, images_dir, _ = _dataset(tmp_path)
    out = tmp_path / "out"
    bc.build_coco(path, images_dir, out, split="val", num_workers=1, progress=False)
    # Default shard count: 10 for val, lowered to the 7 images.
    assert len(list(out.glob("coco_val.record-*-of-00007"))) == 7
    extra = {"id": 30, "image_id": 2, "category_id": 1, "bbox": [1, 1, 9, 9], "area": 81}
    path2, images_dir2, _ = _dataset(tmp_path / "v2", extra_annotation=extra)
    with pytest.raises(FileExistsError, match="different data set"):
        bc.build_coco(path2, images_dir2, out, split="val", num_workers=1, progress=False)
    summary = bc.build_coco(
        path2, images_dir2, out, split="val", num_workers=1, progress=False, overwrite=True
    )
    assert summary.annotations["val"].num_boxes == 5


def test_build_splits_into_one_directory_and_argument_errors(tmp_path):
    path, images_dir, _ = _dataset(tmp_path)
    out = tmp_path / "out"
    summary = bc.build_coco_splits(
        out,
        {"train": (path, images_dir), "val": (path, images_dir)},
        num_shards={"train": 2, "val": 1},
        num_workers=1,
        progress=False,
    )
    assert set(summary.write.splits) == {"train", "val"}
    assert not (out / "instances_train.json").exists()  # only non-train annotations are copied
    assert coco.num_examples(out, "train") == 4 and coco.num_examples(out, "val") == 4
    with pytest.raises(FileNotFoundError, match="image folder"):
        bc.build_coco(path, tmp_path / "nope", out, split="val", progress=False)
    with pytest.raises(FileNotFoundError):
        bc.build_coco(tmp_path / "nope.json", images_dir, out, split="val", progress=False)
    with pytest.raises(ValueError, match="quality"):
        bc.build_coco(path, images_dir, out, split="val", quality=0, progress=False)
