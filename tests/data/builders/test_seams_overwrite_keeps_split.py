"""`--overwrite` of one split into a folder that keeps another: the kept split's files stay
byte-identical and `dataset_info.json` still describes it (its entry equal to the one before).

Before: `build_imagenet(overwrite=True)` deleted `dataset_info.json` before writing, so the
rebuilt file described train only and the kept validation shards lost their entry.
"""

from __future__ import annotations

import shutil

import pytest
from imagenet_testdata import encode, make_raw, smooth_image

from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.dataset_info import read_dataset_info


def _build(raw, out, **kwargs):
    kwargs = {"train_shards": 2, "val_shards": 2, **kwargs}
    return build_imagenet(raw, out, num_workers=1, progress=False, **kwargs)


def _files(out, prefix):
    return {p.name: p.read_bytes() for p in sorted(out.glob(f"{prefix}*"))}


def _entry(info, split):
    return info.splits[split], [c.images[split] for c in info.classes]


@pytest.mark.parametrize("train_shards", [3, 1])
def test_imagenet_overwrite_of_train_keeps_validation_and_its_entry(tmp_path, train_shards):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    out = tmp_path / "out"
    _build(raw, out)
    validation = _files(out, "validation")
    before = read_dataset_info(out)
    shutil.rmtree(raw / "validation")  # rebuild train only, with another shard count
    summary = _build(raw, out, train_shards=train_shards, overwrite=True)
    assert set(summary.write.splits) == {"train"}
    assert len(list(out.glob("train-*-of-*"))) == train_shards
    assert _files(out, "validation") == validation  # every kept file byte-identical
    after = read_dataset_info(out)
    assert _entry(after, "validation") == _entry(before, "validation")
    assert _entry(after, "train") == _entry(before, "train")  # same images, new shards


def test_imagenet_overwrite_with_other_classes_is_refused_while_validation_is_kept(tmp_path):
    # The kept validation records carry labels of the old class list: a train split with
    # another class list beside them would give the same label to other classes.
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    out = tmp_path / "out"
    _build(raw, out)
    kept = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    shutil.rmtree(raw / "validation")
    extra = raw / "train" / "n00000004"
    extra.mkdir()
    for i in range(2):
        (extra / f"x{i}.JPEG").write_bytes(encode(smooth_image(100 + i)))
    with pytest.raises(ValueError, match="validation") as e:
        _build(raw, out, overwrite=True)
    assert "n00000004" in str(e.value)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == kept
