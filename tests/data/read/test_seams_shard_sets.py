"""A split whose `-NNNNN-of-NNNNN` shard set is incomplete is refused where every reader
lists its files (`list_split_files`, through `cvbench.utils.files.check_shard_set`), naming
the split, the folder and the first missing shards. Before, a missing shard silently
trained (or evaluated) on less: `cvbench train --data-dir` on 3 of 4 shards ran."""

from __future__ import annotations

import pytest

from cvbench import cli
from cvbench.data.read.coco import list_record_files
from cvbench.data.read.reader import list_split_files
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import check_shard_set


def _touch(folder, *names):
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"x")  # not 0 bytes: a truncated copy
    return folder


def test_missing_shards_are_named_first_three_then_dots():
    # 8 shards, 5 kept (0, 2, 4, 6, 7): missing 1, 3, 5, the first three named.
    files = [f"d/validation-{i:05d}-of-00008" for i in (0, 2, 4, 6, 7)]
    with pytest.raises(BadFileError) as error:
        check_shard_set(files, split="validation", folder="d")
    assert str(error.value) == (
        "the validation split in d is incomplete: 3 of its 8 shards are missing "
        "(validation-00001-of-00008, validation-00003-of-00008, validation-00005-of-00008); "
        "copy them back or build the records again"
    )
    four_missing = [f"d/t-{i:05d}-of-00005" for i in (4,)]  # 0-3 missing: 4 > 3 named
    with pytest.raises(BadFileError, match=r"4 of its 5 .*t-00002-of-00005, \.\.\.\)"):
        check_shard_set(four_missing, split="t", folder="d")


def test_a_complete_set_and_files_not_named_as_shards_pass():
    check_shard_set([], split="train", folder="d")
    check_shard_set(["d/train-00000-of-00001"], split="train", folder="d")
    check_shard_set(["d/a.tfrecord", "d/b.tfrecord", "d/train-1-of-3"], split="x", folder="d")


@pytest.mark.parametrize("total, kept", [(2, (1,)), (4, (0, 1, 3)), (128, range(1, 128))])
def test_list_split_files_refuses_an_incomplete_split(tmp_path, total, kept):
    folder = _touch(tmp_path / "d", *(f"train-{i:05d}-of-{total:05d}" for i in kept))
    missing = next(i for i in range(total) if i not in kept)
    with pytest.raises(BadFileError, match=f"train-{missing:05d}-of-{total:05d}") as error:
        list_split_files(folder, "train")
    assert f"the train split in {folder} is incomplete" in str(error.value)


def test_other_splits_and_unnamed_patterns_are_not_affected(tmp_path):
    folder = _touch(tmp_path / "d", "train-00000-of-00001", "validation-00001-of-00002",
                    "x.tfrecord", "y.tfrecord")  # fmt: skip
    assert [p.rsplit("/", 1)[1] for p in list_split_files(folder, "train")] == [
        "train-00000-of-00001"
    ]
    assert len(list_split_files(folder, "ignored", "*.tfrecord")) == 2
    with pytest.raises(BadFileError, match="validation-00000-of-00002"):
        list_split_files(folder, "validation")
    # Regression (CI of 2026-12-05: the DALI and tf.data tests reading one shard of two): a
    # file pattern is the caller's choice of files, one shard of an incomplete set included.
    chosen = list_split_files(folder, "validation", "validation-00001-of-00002")
    assert [p.rsplit("/", 1)[1] for p in chosen] == ["validation-00001-of-00002"]


def test_coco_records_are_checked_too(tmp_path):
    names = ("coco_val.record-00000-of-00003", "coco_val.record-00002-of-00003")
    folder = _touch(tmp_path / "c", *names)
    with pytest.raises(BadFileError, match=r"coco_val.record-00001-of-00003"):
        list_record_files(folder, "val")


@pytest.mark.slow
def test_cvbench_train_on_an_incomplete_split_is_one_line_and_exit_1(tmp_path, capsys):
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    raw = write_classification_set(
        tmp_path / "raw", image_size=32, train_per_class=1, val_per_class=1, seed=0
    )
    records = tmp_path / "records"
    build_imagenet(raw.path, records, train_shards=3, val_shards=1, num_workers=1, progress=False)
    (records / "train-00001-of-00003").unlink()
    argv = ["train", "--model", "resnet18", "--data-dir", str(records), "--image-size", "32",
            "--batch-size", "2", "--precision", "fp32", "--epochs", "1", "--eval", "none",
            "--no-progress"]  # fmt: skip
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        f"cvbench train: error: the train split in {records} is incomplete: 1 of its 3 "
        "shards are missing (train-00001-of-00003); copy them back or build the "
        "records again\n"
    )
