"""`dataset_info.json`: the format (round trip, bad files) and that both builders write it."""

from __future__ import annotations

import doctest
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from imagenet_testdata import CLASSES, NUM_TRAIN_RECORDS, NUM_VAL_RECORDS, make_raw
from PIL import Image

from cvbench.data import dataset_info as module
from cvbench.data.builders.manifest import MANIFEST_NAME
from cvbench.data.dataset_info import (
    DATASET_INFO_NAME,
    ClassInfo,
    DatasetInfo,
    read_dataset_info,
    write_dataset_info,
)
from cvbench.utils.errors import BadFileError

IMAGENET_INFO = DatasetInfo(
    kind="imagenet",
    classes=(
        ClassInfo("n01440764", "tench, Tinca tinca", {"train": 3, "validation": 1}),
        ClassInfo("n01443537", None, {"train": 2, "validation": 0}),
    ),
    label_offset=1,
    image_policy={"resize": [64, 48], "quality": 90},
    splits={"train": 5, "validation": 1},
)


@pytest.mark.backend_agnostic
def test_docstring_example_runs():
    # 3 in the module docstring, 4 in class_difference, 4 in merge_splits, 3 in only_splits.
    assert doctest.testmod(module, raise_on_error=True).attempted == 14


@pytest.mark.backend_agnostic
def test_round_trip_through_the_file(tmp_path):
    path = write_dataset_info(tmp_path, IMAGENET_INFO)
    assert path == tmp_path / DATASET_INFO_NAME
    back = read_dataset_info(tmp_path)
    assert back == IMAGENET_INFO
    # The class without a text is named by its id; indices are 0-based in class order.
    assert back.num_classes == 2
    assert back.class_names == ("tench, Tinca tinca", "n01443537")
    assert json.loads(path.read_text())["format"] == 1


@pytest.mark.backend_agnostic
def test_coco_info_keeps_int_ids_and_gives_category_ids(tmp_path):
    info = DatasetInfo(
        kind="coco",
        classes=(ClassInfo(1, "person", {"val": 2}), ClassInfo(3, "car", {"val": 1})),
        image_policy={"resize": None, "quality": 95},
    )
    write_dataset_info(tmp_path, info)
    back = read_dataset_info(tmp_path)
    assert back == info and back.category_ids == (1, 3) and back.label_offset is None
    with pytest.raises(ValueError, match="category_ids are COCO's"):
        _ = IMAGENET_INFO.category_ids


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_the_file_gets_the_mode_open_would_give(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = write_dataset_info(tmp_path, IMAGENET_INFO)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir()] == [DATASET_INFO_NAME]  # no temporary left


@pytest.mark.backend_agnostic
def test_a_folder_without_the_file_gives_none(tmp_path):
    assert read_dataset_info(tmp_path) is None


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "is not valid JSON: Expecting property name"),
        ("[" * 100000, "JSON nested 100000 levels deep, over the limit of 200"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"format": 7, "kind": "imagenet", "classes": []}', "unknown format 7"),
        ('{"format": 1, "kind": "imagenet"}', "malformed field: KeyError('classes')"),
        ('{"format": 1, "kind": "voc", "classes": [{"id": "a"}]}', "kind must be one of"),
        ('{"format": 1, "kind": "imagenet", "classes": []}', "at least one class"),
        ('{"format": 1, "kind": "imagenet", "classes": [{"id": "a"}, {"id": "a"}]}', "unique"),
        ('{"format": 1, "kind": "coco", "classes": [{"id": 3}, {"id": 1}]}', "increasing order"),
        ('{"format": 1, "kind": "coco", "classes": [{"id": "1"}]}', "int category ids in 1.."),
        # Above MAX_CATEGORY_ID: the detection task would build a range of that length.
        ('{"format": 1, "kind": "coco", "classes": [{"id": 10001}]}', "ids in 1..10000 in"),
        ('{"format": 1, "kind": "coco", "classes": [{"id": true}]}', "ids in 1..10000 in"),
    ],
)
def test_a_bad_file_is_a_bad_file_error_naming_it(tmp_path, text, why):
    (tmp_path / DATASET_INFO_NAME).write_text(text)
    with pytest.raises(BadFileError) as e:  # a ValueError; exit status 1 in the command
        read_dataset_info(tmp_path)
    assert str(tmp_path / DATASET_INFO_NAME) in str(e.value) and why in str(e.value)


@pytest.mark.backend_agnostic
def test_an_unreadable_file_is_a_value_error_naming_it(tmp_path):
    (tmp_path / DATASET_INFO_NAME).mkdir()  # a folder where the file should be
    with pytest.raises(BadFileError, match="dataset metadata file .*dataset_info.json is a fold"):
        read_dataset_info(tmp_path)


@pytest.mark.backend_agnostic
def test_a_fifo_is_refused_without_blocking(tmp_path):
    # The fault: read_text() on a FIFO named dataset_info.json waited for a writer forever.
    os.mkfifo(tmp_path / DATASET_INFO_NAME)
    with pytest.raises(BadFileError, match=r"dataset_info.json is a FIFO \(named pipe\), not a"):
        read_dataset_info(tmp_path)


# ------------------------------------------------------------------ the builders write it
def test_build_imagenet_writes_classes_texts_counts_and_policy(tmp_path):
    from cvbench.data import build_imagenet

    make_raw(tmp_path / "raw", val_layout="folders")
    # A text for two of the three classes: the third keeps no name (shown as its id).
    (tmp_path / "raw" / "imagenet_metadata.txt").write_text(
        f"{CLASSES[0]}\tfirst class\n{CLASSES[2]}\tthird class\n"
    )
    out = tmp_path / "records"
    build_imagenet(tmp_path / "raw", out, train_shards=2, val_shards=1, resize=32,
                   quality=80, num_workers=1, progress=False)  # fmt: skip
    info = read_dataset_info(out)
    assert info.kind == "imagenet" and info.label_offset == 1
    assert [c.id for c in info.classes] == CLASSES
    assert info.class_names == ("first class", CLASSES[1], "third class")
    assert [c.name for c in info.classes] == ["first class", None, "third class"]
    # Found per class (imagenet_testdata): class 1 has 4 JPEGs + the PNG + the truncated file
    # (found, then skipped: 6), class 2 has 4 + the CMYK one (notes.txt is no image: 5), class 3
    # 4 + the grayscale one (5); validation 2 each. Records: 15 train (the truncated file is
    # skipped), 6 validation.
    assert [dict(c.images) for c in info.classes] == [
        {"train": 6, "validation": 2},
        {"train": 5, "validation": 2},
        {"train": 5, "validation": 2},
    ]
    assert dict(info.splits) == {"train": NUM_TRAIN_RECORDS, "validation": NUM_VAL_RECORDS}
    assert dict(info.image_policy) == {"resize": 32, "quality": 80}


@pytest.mark.parametrize("overwrite", [True, False])
def test_an_overwriting_build_removes_the_old_file_before_writing_shards(
    tmp_path, monkeypatch, overwrite
):
    # A build killed while overwriting another data set must not leave that set's classes
    # beside its half-written shards; without overwrite the old set stays whole (the writer
    # refuses to touch it), so its file stays too.
    from cvbench.data import build_imagenet
    from cvbench.data.builders import imagenet_builder

    make_raw(tmp_path / "raw", val_layout="folders")
    out = tmp_path / "records"
    write_dataset_info(out, IMAGENET_INFO)
    # A data set cvbench built: its manifest beside the file (a user's own dataset_info.json
    # in a folder without one is never replaced: tests/reliability/test_hostile_data.py).
    (out / MANIFEST_NAME).write_text(
        '{"format": 1, "dataset": "imagenet", "options": {}, "splits": {}, "shards": {}}'
    )
    seen = []

    def killed(out_dir, *args, **kwargs):
        seen.append((Path(out_dir) / DATASET_INFO_NAME).exists())
        raise KeyboardInterrupt

    monkeypatch.setattr(imagenet_builder, "write_sharded", killed)
    with pytest.raises(KeyboardInterrupt):
        build_imagenet(tmp_path / "raw", out, train_shards=1, val_shards=1, num_workers=1,
                       progress=False, overwrite=overwrite)  # fmt: skip
    assert seen == [not overwrite]
    assert (read_dataset_info(out) == IMAGENET_INFO) is (not overwrite)


def _jpeg(path: Path, height: int, width: int) -> None:
    buf = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 128, np.uint8)).save(buf, "JPEG")
    path.write_bytes(buf.getvalue())


def test_build_coco_writes_categories_in_id_order_with_names_and_counts(tmp_path):
    from cvbench.data import build_coco_splits

    (tmp_path / "img").mkdir()
    images = [{"id": i, "file_name": f"{i}.jpg", "height": 20, "width": 30} for i in (1, 2, 3)]
    for im in images:
        _jpeg(tmp_path / "img" / im["file_name"], 20, 30)
    anns = [  # image 1: two cars and a person; image 2: a car; image 3: a zero-size person
        (1, 3, [0, 0, 10, 10]), (1, 3, [5, 5, 10, 10]), (1, 1, [0, 0, 5, 5]),
        (2, 3, [1, 1, 4, 4]), (3, 1, [2, 2, 0, 3]),
    ]  # fmt: skip
    data = {
        "images": images,
        "annotations": [
            {"id": k, "image_id": i, "category_id": c, "bbox": b, "iscrowd": 0}
            for k, (i, c, b) in enumerate(anns, start=1)
        ],
        # Not in id order, and "bus" (id 90) has no box at all: it is still a class.
        "categories": [
            {"id": 90, "name": "bus"},
            {"id": 3, "name": "car"},
            {"id": 1, "name": "person"},
        ],  # fmt: skip
    }
    ann_path = tmp_path / "instances_val.json"
    ann_path.write_text(json.dumps(data))
    out = tmp_path / "records"
    build_coco_splits(out, {"val": (ann_path, tmp_path / "img")}, num_workers=1, progress=False,
                      quality=85)  # fmt: skip
    info = read_dataset_info(out)
    assert info.kind == "coco" and info.label_offset is None
    assert info.category_ids == (1, 3, 90)
    assert info.class_names == ("person", "car", "bus")
    # person: image 1 only (image 3's box is skipped as zero-size); car: images 1 and 2 (the
    # two cars of image 1 count once); bus: none.
    assert [dict(c.images) for c in info.classes] == [{"val": 1}, {"val": 2}, {"val": 0}]
    assert dict(info.splits) == {"val": 3}
    assert dict(info.image_policy) == {"resize": None, "quality": 85}


def test_build_coco_without_categories_writes_no_file(tmp_path):
    # A test-images file (image_info_test2017.json) lists images only: there are no classes.
    from cvbench.data import build_coco_splits

    (tmp_path / "img").mkdir()
    _jpeg(tmp_path / "img" / "1.jpg", 20, 30)
    ann_path = tmp_path / "image_info_test.json"
    ann_path.write_text(
        json.dumps({"images": [{"id": 1, "file_name": "1.jpg", "height": 20, "width": 30}]})
    )
    out = tmp_path / "records"
    build_coco_splits(out, {"test": (ann_path, tmp_path / "img")}, num_workers=1, progress=False)
    assert read_dataset_info(out) is None and not (out / DATASET_INFO_NAME).exists()


@pytest.mark.parametrize("builder", ["imagenet", "coco"])
def test_a_full_disk_writing_the_file_is_a_disk_full_error(tmp_path, monkeypatch, builder):
    import errno

    from cvbench.data.builders import coco_builder, imagenet_builder
    from cvbench.data.builders.sharded_writer import DiskFullError

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "records"
    if builder == "imagenet":
        make_raw(tmp_path / "raw", val_layout="folders")
        monkeypatch.setattr(imagenet_builder, "write_dataset_info", full)
        build = lambda: imagenet_builder.build_imagenet(  # noqa: E731
            tmp_path / "raw", out, train_shards=2, val_shards=1, num_workers=1, progress=False
        )
        shards = 3  # 2 train + 1 validation, all whole
    else:
        (tmp_path / "img").mkdir()
        _jpeg(tmp_path / "img" / "1.jpg", 20, 30)
        ann = tmp_path / "instances_val.json"
        ann.write_text(json.dumps({
            "images": [{"id": 1, "file_name": "1.jpg", "height": 20, "width": 30}],
            "annotations": [], "categories": [{"id": 1, "name": "a"}],
        }))  # fmt: skip
        monkeypatch.setattr(coco_builder, "write_dataset_info", full)
        build = lambda: coco_builder.build_coco(  # noqa: E731
            ann, tmp_path / "img", out, split="val", num_workers=1, progress=False
        )
        shards = 1
    with pytest.raises(DiskFullError) as caught:
        build()
    assert (caught.value.path, caught.value.finished_shards) == (out / DATASET_INFO_NAME, shards)
