"""Every reader lists a split through one function (`cvbench.data.read.splits.list_split_files`),
which refuses a 0-byte shard (a truncated copy) unless the build manifest records it so, and
where the two former listings (the tf.data reader's, grain's) disagreed, keeps one rule.

Before: a `train-00001-of-00002` copied as 0 bytes read as a shard without records, and the
run trained on half the split; grain listed `a[bc]` shards of the split `ab`, and said
nothing of a folder of raw images."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PIL import Image

from cvbench.data.read.splits import BUILD_MANIFEST, list_split_files, split_glob
from cvbench.utils.errors import BadFileError

#: Where a reader lists its split, each called as it lists (`read(data_dir, split)`); the
#: ImageNet readers read `train-*`, the COCO ones `coco_train.record-*`.
READERS = {
    "tf.data imagenet_dataset": ("train", "imagenet_dataset"),
    "tf.data num_examples": ("train", "imagenet_count"),
    "tf.data coco_dataset": ("coco_train.record", "coco_dataset"),
    "tf.data coco num_examples": ("coco_train.record", "coco_count"),
    "grain imagenet_grain_dataset": ("train", "grain_dataset"),
    "grain count_records": ("train", "grain_count"),
    "DALI imagenet_dali_dataset": ("train", "dali_dataset"),
}


def _read(kind: str, data_dir):
    batch = {"batch_size": 1, "image_size": 32, "training": False}
    if kind == "imagenet_dataset":
        from cvbench.data.read.imagenet import imagenet_dataset

        return imagenet_dataset(data_dir, "train", **batch)
    if kind == "imagenet_count":
        from cvbench.data.read.imagenet import num_examples

        return num_examples(data_dir, "train")
    if kind == "coco_dataset":
        from cvbench.data.read.coco import coco_dataset

        return coco_dataset(data_dir, "train", **batch)
    if kind == "coco_count":
        from cvbench.data.read.coco import num_examples

        return num_examples(data_dir, "train")
    if kind == "grain_dataset":
        from cvbench.data.grain.dataset import imagenet_grain_dataset

        return imagenet_grain_dataset(data_dir, "train", **batch)
    if kind == "grain_count":
        from cvbench.data.grain.dataset import count_records

        return count_records(data_dir, "train")
    pytest.importorskip("nvidia.dali")
    from cvbench.data.dali.dataset import imagenet_dali_dataset

    return imagenet_dali_dataset(data_dir, "train", **batch)


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_a_zero_byte_shard_naming_it(tmp_path, reader):
    prefix, kind = READERS[reader]
    (tmp_path / f"{prefix}-00000-of-00002").write_bytes(b"\0" * 16)  # listed, never read
    empty = tmp_path / f"{prefix}-00001-of-00002"
    empty.write_bytes(b"")
    with pytest.raises(BadFileError) as error:
        _read(kind, tmp_path)
    assert str(error.value) == (
        f"{empty} is 0 bytes: a truncated copy? cvbench's builders write an empty shard only "
        "when they skipped every image of it, and record it so in cvbench_manifest.json; "
        "copy it again (with that file) or build the records again"
    )


def test_a_missing_shard_is_named_before_an_empty_one(tmp_path):
    # 0 of 3 empty, 1 missing: the set is checked first (a missing shard is the larger loss).
    (tmp_path / "train-00000-of-00003").write_bytes(b"")
    (tmp_path / "train-00002-of-00003").write_bytes(b"x")
    with pytest.raises(BadFileError, match=r"incomplete: 1 of its 3 shards are missing"):
        list_split_files(tmp_path, "train")


@pytest.mark.backend_agnostic
def test_a_file_pattern_names_the_callers_files_empty_ones_too(tmp_path):
    # A TFRecord file of 0 records is 0 bytes: one another writer made is the caller's choice.
    from cvbench.data.grain.dataset import count_records
    from cvbench.data.read.imagenet import num_examples

    (tmp_path / "train-00000-of-00001").write_bytes(b"")
    chosen = list_split_files(tmp_path, "train", "train-*")
    assert chosen == [str(tmp_path / "train-00000-of-00001")]
    assert num_examples(tmp_path, "train", file_pattern="train-*") == 0
    assert count_records(tmp_path, "train", file_pattern="train-*") == 0
    with pytest.raises(BadFileError, match="is 0 bytes"):
        list_split_files(tmp_path, "train")


@pytest.fixture(scope="module")
def built_with_an_empty_shard(tmp_path_factory):
    """`build_imagenet` of 2 images in 2 shards, one image unreadable: the builder skips it
    and writes its shard at 0 bytes (`cvbench_manifest.json` records 0 records, 0 bytes)."""
    from cvbench.data.builders.imagenet_builder import build_imagenet

    raw = tmp_path_factory.mktemp("raw")
    for name in ("cat", "dog"):
        (raw / "train" / name).mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(raw / "train" / "cat" / "a.jpg")
    (raw / "train" / "dog" / "b.jpg").write_bytes(b"not an image")
    out = tmp_path_factory.mktemp("records")
    build_imagenet(raw, out, train_shards=2, num_workers=1, progress=False)
    return out


def _empty_shard(folder):
    sizes = {p.name: p.stat().st_size for p in folder.glob("train-*")}
    assert sorted(sizes.values())[0] == 0 and sorted(sizes.values())[1] > 0, sizes
    return next(name for name, size in sizes.items() if size == 0)


@pytest.mark.backend_agnostic
def test_a_shard_the_builder_wrote_empty_is_read_as_no_records(built_with_an_empty_shard):
    from cvbench.data.grain.dataset import count_records
    from cvbench.data.read.imagenet import num_examples

    folder = built_with_an_empty_shard
    empty = _empty_shard(folder)
    manifest = json.loads((folder / BUILD_MANIFEST).read_text())
    assert manifest["shards"][empty] == {"records": 0, "bytes": 0, "skipped": manifest[
        "shards"][empty]["skipped"]}  # fmt: skip
    assert len(list_split_files(folder, "train")) == 2
    # 2 images, 1 skipped: 1 record, the same through tf.data's count and grain's.
    assert num_examples(folder, "train") == 1
    assert count_records(folder, "train") == 1


def test_an_empty_shard_copied_without_the_manifest_is_refused(built_with_an_empty_shard, tmp_path):
    empty = _empty_shard(built_with_an_empty_shard)
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in built_with_an_empty_shard.glob("train-*"):
        shutil.copy(path, copy / path.name)  # the shards only
    with pytest.raises(BadFileError, match=f"^{copy / empty} is 0 bytes"):
        list_split_files(copy, "train")
    (copy / BUILD_MANIFEST).write_text("{")  # an unreadable manifest records nothing
    with pytest.raises(BadFileError, match=f"^{copy / empty} is 0 bytes"):
        list_split_files(copy, "train")


def test_a_built_shard_truncated_to_zero_bytes_is_refused(built_with_an_empty_shard, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(built_with_an_empty_shard, copy)
    full = next(p for p in copy.glob("train-*") if p.stat().st_size > 0)
    full.write_bytes(b"")  # the manifest records it with its bytes: a truncated copy
    with pytest.raises(BadFileError, match=f"^{full} is 0 bytes"):
        list_split_files(copy, "train")


def test_the_manifest_name_and_bound_are_the_builders():
    from cvbench.data.builders import manifest
    from cvbench.data.read import splits

    assert splits.BUILD_MANIFEST == manifest.MANIFEST_NAME
    assert splits.MAX_BUILD_MANIFEST_BYTES == manifest.MAX_MANIFEST_BYTES


# --- where the tf.data reader's and grain's listings disagreed ----------------------------


def test_a_split_name_is_literal_for_grain_too(tmp_path):
    # grain's listing did not escape the split: `a[bc]` read the shards of the split `ab`.
    from cvbench.data.grain.dataset import count_records

    (tmp_path / "ab-00000-of-00001").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="no TFRecord files matching"):
        count_records(tmp_path, "a[bc]")
    assert split_glob("a[bc]").startswith("a[[]bc]-")


def test_shard_indexes_are_five_digits_for_tf_data_too(tmp_path):
    # tf.data's `?????` listed `train-0000a-of-00001`, which the set check (five digits) did
    # not read as a shard; grain listed digits only. Digits kept: every file listed is checked.
    from cvbench.data.read.imagenet import num_examples

    (tmp_path / "train-0000a-of-00001").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="no TFRecord files matching"):
        num_examples(tmp_path, "train")
    (tmp_path / "train-00000-of-00001").write_bytes(b"x")
    assert list_split_files(tmp_path, "train") == [str(tmp_path / "train-00000-of-00001")]


def test_grain_names_the_builder_of_a_folder_of_raw_images(tmp_path):
    # grain said only "no TFRecord files matching ..."; tf.data named the command to run.
    from cvbench.data.grain.dataset import count_records

    (tmp_path / "cat").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "cat" / "1.jpg")
    with pytest.raises(FileNotFoundError, match="holds images in class folders .* build-imagenet"):
        count_records(tmp_path, "train")


def test_grain_names_the_shard_files_present(tmp_path):
    from cvbench.data.grain.dataset import count_records

    (tmp_path / "validation-00000-of-00001").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="; shard files present for: validation$"):
        count_records(tmp_path, "train")


def test_cvbench_bench_input_on_a_zero_byte_shard_is_one_line_and_exit_1(tmp_path, capsys):
    from cvbench import cli

    (tmp_path / "train-00000-of-00002").write_bytes(b"x")
    (tmp_path / "train-00001-of-00002").write_bytes(b"")
    argv = ["bench-input", "--data-dir", str(tmp_path), "--batches", "1", "--rounds", "1",
            "--warmup-batches", "0"]  # fmt: skip
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"cvbench bench-input: error: {tmp_path}/train-00001-of-00002 is 0 bytes: a truncated "
        "copy? cvbench's builders write an empty shard only when they skipped every image of "
        "it, and record it so in cvbench_manifest.json; copy it again (with that file) or "
        "build the records again"
    )
    assert not any("Traceback" in line for line in err)
