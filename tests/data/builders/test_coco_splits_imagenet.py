"""`build-imagenet` into a folder that holds some of its splits already: the shared writer
keeps the splits a call does not name (#39 item 7, checked for ImageNet as for COCO).

`build_imagenet` always writes train (its class folders define the labels); validation is
written when the raw folder has one. Train first and validation later (the validation
folder arrived after the first build) was refused as "a different data set".
"""

from __future__ import annotations

import shutil

from imagenet_testdata import NUM_TRAIN_RECORDS, NUM_VAL_RECORDS, make_raw

from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.dataset_info import read_dataset_info


def _build(raw, out, **kwargs):
    return build_imagenet(
        raw, out, train_shards=2, val_shards=2, num_workers=1, progress=False, **kwargs
    )


def _files(out, prefix):
    return {p.name: p.read_bytes() for p in sorted(out.glob(f"{prefix}-*"))}


def test_validation_added_later_keeps_train_and_equals_one_build(tmp_path):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    one = tmp_path / "one"
    _build(raw, one)
    # The same raw data, its validation folder added after a first build.
    shutil.move(raw / "validation", tmp_path / "later")
    two = tmp_path / "two"
    _build(raw, two)
    assert not list(two.glob("validation-*"))
    train = {p.name: p.stat().st_mtime_ns for p in two.glob("train-*")}
    shutil.move(tmp_path / "later", raw / "validation")
    summary = _build(raw, two)
    assert summary.write.splits["train"].shards_written == 0  # kept
    assert summary.write.splits["validation"].shards_written == 2
    assert {p.name: p.stat().st_mtime_ns for p in two.glob("train-*")} == train
    for prefix in ("train", "validation"):
        assert _files(one, prefix) == _files(two, prefix)
    assert (one / "dataset_info.json").read_bytes() == (two / "dataset_info.json").read_bytes()
    info = read_dataset_info(two)
    # make_raw: 15 training records (one truncated file skipped), 2 validation images per class.
    assert dict(info.splits) == {"train": NUM_TRAIN_RECORDS, "validation": NUM_VAL_RECORDS}
    assert [c.images["validation"] for c in info.classes] == [2, 2, 2]


def test_a_later_build_without_validation_keeps_it_and_its_description(tmp_path):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    out = tmp_path / "out"
    _build(raw, out)
    validation = _files(out, "validation")
    info = (out / "dataset_info.json").read_bytes()
    shutil.rmtree(raw / "validation")  # the user deleted the raw validation images
    summary = _build(raw, out)
    assert set(summary.write.splits) == {"train"}
    assert summary.write.splits["train"].shards_written == 0
    assert _files(out, "validation") == validation
    # dataset_info.json still describes both splits (write_dataset_info keeps validation).
    assert (out / "dataset_info.json").read_bytes() == info
