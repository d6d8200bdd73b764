"""Several splits of a user's own COCO files in one folder: `cvbench build-coco` call after
call or in one call, `--overwrite` of one split, categories that must agree (#39 item 7)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cvbench.cli import main
from cvbench.data.builders.manifest import MANIFEST_NAME
from cvbench.data.dataset_info import read_dataset_info

CATEGORIES = {3: "cat", 7: "dog"}


def user_split(root: Path, name: str, num_images: int, categories=CATEGORIES, seed=0) -> Path:
    """A user's own split: `root/<name>.json` and `root/<name>/` with `num_images` 32x24
    JPEGs; image i holds one box of category `sorted(categories)[i % len]`."""
    images_dir = root / name
    images_dir.mkdir(parents=True)
    ids = sorted(categories)
    images, anns = [], []
    for i in range(1, num_images + 1):
        buf = io.BytesIO()
        Image.fromarray(np.full((24, 32, 3), (seed * 37 + i * 11) % 256, np.uint8)).save(
            buf, "JPEG"
        )
        (images_dir / f"{i:04d}.jpg").write_bytes(buf.getvalue())
        images.append({"id": i, "file_name": f"{i:04d}.jpg", "height": 24, "width": 32})
        anns.append(
            {"id": i, "image_id": i, "category_id": ids[i % len(ids)], "bbox": [1, 2, 10, 8],
             "area": 80, "iscrowd": 0}
        )  # fmt: skip
    data = {
        "images": images,
        "annotations": anns,
        "categories": [{"id": k, "name": v} for k, v in sorted(categories.items())],
    }
    path = root / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def build(out: Path, *splits: tuple[str, Path], extra: tuple[str, ...] = ()) -> int:
    """`cvbench build-coco OUT --annotations A --images I --split S ...` in this process."""
    argv = ["build-coco", str(out), "--workers", "1", "--no-progress", *extra]
    for split, file in splits:
        argv += ["--annotations", str(file), "--images", str(file.with_suffix(""))]
        argv += ["--split", split]
    return main(argv)


def shards(out: Path, split: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob(f"coco_{split}.record-*"))}


def stamps(out: Path, split: str) -> dict[str, tuple[int, int]]:
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(out.glob(f"coco_{split}.record-*"))
    }


@pytest.fixture()
def user_files(tmp_path):
    """A user's own train (5 images) and val (3 images) files, the same two categories."""
    return user_split(tmp_path / "raw", "train", 5), user_split(tmp_path / "raw", "val", 3, seed=1)


@pytest.mark.parametrize("order", ["train,val", "val,train", "one call"])
def test_train_and_val_build_into_one_folder_in_any_order(tmp_path, user_files, capsys, order):
    train, val = user_files
    out = tmp_path / "out"
    if order == "one call":
        assert build(out, ("train", train), ("val", val)) == 0
    else:
        files = {"train": train, "val": val}
        first, second = order.split(",")
        assert build(out, (first, files[first])) == 0
        before = shards(out, first)
        assert build(out, (second, files[second])) == 0
        assert shards(out, first) == before  # the first split is kept as it was
    # Default shard counts lowered to the images: 5 train shards, 3 val shards.
    assert list(shards(out, "train")) == [f"coco_train.record-{i:05d}-of-00005" for i in range(5)]
    assert list(shards(out, "val")) == [f"coco_val.record-{i:05d}-of-00003" for i in range(3)]
    assert (out / "instances_val.json").read_bytes() == val.read_bytes()
    info = read_dataset_info(out)
    # Categories in id order (index = rank of the id); images i hold category ids[i % 2]:
    # train 1..5 -> 7, 3, 7, 3, 7 (cat 2, dog 3); val 1..3 -> 7, 3, 7 (cat 1, dog 2).
    assert [(c.id, c.name) for c in info.classes] == [(3, "cat"), (7, "dog")]
    assert [dict(c.images) for c in info.classes] == [
        {"train": 2, "val": 1},
        {"train": 3, "val": 2},
    ]
    assert dict(info.splits) == {"train": 5, "val": 3}
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert sorted(manifest["splits"]) == ["train", "val"]
    assert len(manifest["shards"]) == 8
    capsys.readouterr()
    # Rerunning either call writes nothing.
    for split, path in (("train", train), ("val", val)):
        assert build(out, (split, path)) == 0
        assert "0 written now" in capsys.readouterr().out


def test_every_order_gives_the_same_records_and_metadata(tmp_path, user_files):
    train, val = user_files
    one, two = tmp_path / "one", tmp_path / "two"
    assert build(one, ("train", train), ("val", val)) == 0
    assert build(two, ("val", val)) == 0
    assert build(two, ("train", train)) == 0
    for split in ("train", "val"):
        assert shards(one, split) == shards(two, split)
    assert read_dataset_info(one) == read_dataset_info(two)
    assert (one / "dataset_info.json").read_bytes() == (two / "dataset_info.json").read_bytes()
    identity = {k: v for k, v in json.loads((one / MANIFEST_NAME).read_text()).items()}
    other = json.loads((two / MANIFEST_NAME).read_text())
    assert identity["splits"] == other["splits"] and identity["shards"] == other["shards"]


def test_a_rerun_after_losing_a_shard_writes_only_it(tmp_path, user_files, capsys):
    train, val = user_files
    out = tmp_path / "out"
    assert build(out, ("train", train)) == 0
    assert build(out, ("val", val)) == 0
    lost = out / "coco_val.record-00001-of-00003"
    content = lost.read_bytes()
    lost.unlink()
    kept = stamps(out, "train")
    capsys.readouterr()
    assert build(out, ("val", val)) == 0
    assert "1 written now, 2 kept from an earlier run" in capsys.readouterr().out
    assert lost.read_bytes() == content  # byte-identical
    assert stamps(out, "train") == kept


def test_overwrite_replaces_only_the_split_it_names(tmp_path, user_files, capsys):
    train, val = user_files
    out = tmp_path / "out"
    assert build(out, ("train", train), ("val", val)) == 0
    train_before = stamps(out, "train")
    train_bytes = shards(out, "train")
    # The user fixes their val file: 4 images now.
    (val.with_suffix("")).rename(tmp_path / "old_val")
    val = user_split(tmp_path / "raw2", "val", 4, seed=2)
    capsys.readouterr()
    assert build(out, ("val", val)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cvbench: error: {out} holds a different data set")
    assert "splits.val.items_sha256" in err and "--overwrite" in err
    assert len(err.splitlines()) == 1
    assert build(out, ("val", val), extra=("--overwrite",)) == 0
    # 4 val shards now; the 3 of the old val are gone, train's are untouched.
    assert list(shards(out, "val")) == [f"coco_val.record-{i:05d}-of-00004" for i in range(4)]
    assert stamps(out, "train") == train_before and shards(out, "train") == train_bytes
    info = read_dataset_info(out)
    assert dict(info.splits) == {"train": 5, "val": 4}
    # val 1..4 -> 7, 3, 7, 3: cat 2, dog 2; train's counts kept.
    assert [dict(c.images) for c in info.classes] == [
        {"train": 2, "val": 2},
        {"train": 3, "val": 2},
    ]
    assert json.loads((out / "instances_val.json").read_text())["images"][3]["id"] == 4


def test_overwrite_never_deletes_a_file_cvbench_did_not_write(tmp_path, user_files, capsys):
    train, val = user_files
    out = tmp_path / "out"
    assert build(out, ("train", train)) == 0
    # A file named like a val shard that no manifest lists: another tool's.
    foreign = out / "coco_val.record-00000-of-00009"
    foreign.write_bytes(b"the user's")
    for extra in ((), ("--overwrite",)):
        capsys.readouterr()
        assert build(out, ("val", val), extra=extra) == 2
        err = capsys.readouterr().err.strip()
        assert f"{out} already holds 1 files named like shards of split 'val'" in err
        assert "coco_val.record-00000-of-00009" in err and len(err.splitlines()) == 1
    assert foreign.read_bytes() == b"the user's"
    assert list(shards(out, "val")) == ["coco_val.record-00000-of-00009"]
    assert len(shards(out, "train")) == 5
    # The user's own instances_val.json is never replaced either (written_by_cvbench).
    foreign.unlink()
    (out / "instances_val.json").write_text("{}")
    assert build(out, ("val", val), extra=("--overwrite",)) == 2
    assert "instances_val.json exists and was not written by cvbench" in capsys.readouterr().err
    assert (out / "instances_val.json").read_text() == "{}"


@pytest.mark.parametrize(
    ("val_categories", "difference"),
    [
        ({3: "cat", 7: "wolf"}, "category 7 is named 'dog' in split train, 'wolf' in split val"),
        (
            {3: "cat"},
            "2 categories in split train, 1 in split val: category 7 ('dog') is in split "
            "train but not in split val",
        ),
        (
            {3: "cat", 7: "dog", 9: "owl"},
            "2 categories in split train, 3 in split val: category 9 ('owl') is in split val "
            "but not in split train",
        ),
    ],
)
def test_categories_must_agree_between_splits(tmp_path, capsys, val_categories, difference):
    train = user_split(tmp_path / "raw", "train", 5)
    val = user_split(tmp_path / "raw", "val", 3, categories=val_categories)
    one, two = tmp_path / "one", tmp_path / "two"
    # In one call: refused before anything is written.
    assert build(one, ("train", train), ("val", val)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"cvbench: error: {val}: its categories differ from those of split train: "
        f"{difference}; every split of a folder needs the same categories (a class index is "
        "the rank of its category id): fix the file, or build it into another output folder"
    )
    assert not list(one.glob("coco_*"))
    # Call after call, with or without --overwrite: the kept split's categories rule.
    assert build(two, ("train", train)) == 0
    info = (two / "dataset_info.json").read_bytes()
    expected = (
        f"cvbench: error: {val}: its categories differ from those of split train already in "
        f"{two}: {difference}; every split of a folder needs the same categories (a class "
        "index is the rank of its category id): fix the file, or build it into another "
        "output folder"
    )
    for extra in ((), ("--overwrite",)):
        capsys.readouterr()
        assert build(two, ("val", val), extra=extra) == 2
        assert capsys.readouterr().err.strip() == expected
    assert not list(two.glob("coco_val*")) and not (two / "instances_val.json").exists()
    assert (two / "dataset_info.json").read_bytes() == info
    # Replacing a good val by the bad one: the split kept is train (val is the one replaced).
    good = user_split(tmp_path / "good", "val", 3)
    assert build(two, ("val", good)) == 0
    before = shards(two, "val")
    capsys.readouterr()
    assert build(two, ("val", val), extra=("--overwrite",)) == 2
    assert capsys.readouterr().err.strip() == expected
    assert shards(two, "val") == before


def test_other_settings_beside_a_kept_split_are_refused_even_with_overwrite(
    tmp_path, user_files, capsys
):
    train, val = user_files
    out = tmp_path / "out"
    assert build(out, ("train", train)) == 0
    before = stamps(out, "train")
    for extra in (("--quality", "90"), ("--quality", "90", "--overwrite")):
        capsys.readouterr()
        assert build(out, ("val", val), extra=extra) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"cvbench: error: {out} holds the split(s) train of another data ")
        assert "options.quality: 95 -> 90" in err and len(err.splitlines()) == 1
    assert stamps(out, "train") == before and not list(out.glob("coco_val*"))
    assert dict(read_dataset_info(out).splits) == {"train": 5}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--annotations", "t.json", "--images", "t"], "--annotations needs --images DIR and"),
        (
            ["--annotations", "t.json", "--images", "t", "--split", "a", "--annotations",
             "v.json", "--split", "b"],
            "(got 2 --annotations, 1 --images, 2 --split)",
        ),
        (
            ["--annotations", "t.json", "--images", "t", "--split", "a", "--annotations",
             "t.json", "--images", "t", "--split", "a"],
            "--split a is given twice",
        ),
        (
            ["--annotations", "t.json", "--images", "t", "--split", "a", "--num-shards", "1",
             "--num-shards", "2"],
            "--num-shards: give it once, or once per --split (1), got 2",
        ),
    ],
)  # fmt: skip
def test_repeated_flags_must_pair_up(tmp_path, monkeypatch, capsys, argv, message):
    (tmp_path / "t.json").write_text("{}")
    (tmp_path / "t").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["build-coco", "out", *argv]) == 2
    assert message in capsys.readouterr().err


def test_num_shards_once_per_split(tmp_path, user_files):
    train, val = user_files
    out = tmp_path / "out"
    extra = ("--num-shards", "2", "--num-shards", "1")
    assert build(out, ("train", train), ("val", val), extra=extra) == 0
    assert list(shards(out, "train")) == [f"coco_train.record-{i:05d}-of-00002" for i in range(2)]
    assert list(shards(out, "val")) == ["coco_val.record-00000-of-00001"]


def test_the_reader_finds_each_split_of_a_folder_built_in_two_calls(tmp_path, user_files):
    from cvbench.data.read import coco

    train, val = user_files
    out = tmp_path / "out"
    assert build(out, ("val", val)) == 0
    assert build(out, ("train", train)) == 0
    assert coco.num_examples(out, "train") == 5 and coco.num_examples(out, "val") == 3
    ids = []
    for _, meta in coco.coco_dataset(out, "val", batch_size=2, image_size=32, training=False):
        ids += meta["image_id"].numpy()[meta["valid"].numpy()].tolist()
    assert sorted(ids) == [1, 2, 3]  # val's images, each once


def _numbers(n: int) -> bytes:
    from cvbench.data.tfrecord import encode_example, int64_feature

    return encode_example({"n": int64_feature(n)})


def test_overwrite_of_a_split_never_deletes_another_whose_name_shares_its_prefix(tmp_path):
    # The shell pattern of split "train" ("train-*-of-*") also matches "train-x-00000-of-00001";
    # the shards an overwrite deletes are those the manifest lists for the split named.
    from cvbench.data.builders.sharded_writer import SplitSpec, write_sharded

    def write(name, items, shards, **kwargs):
        spec = SplitSpec(name, items, shards)
        return write_sharded(
            tmp_path, [spec], _numbers, dataset="n", num_workers=1, progress=False, **kwargs
        )

    write("train-x", [1, 2], 1)
    write("train", [1, 2, 3], 3)
    other = (tmp_path / "train-x-00000-of-00001").read_bytes()
    summary = write("train", [1, 2, 3, 4], 2, overwrite=True)
    assert summary.splits["train"].shards_written == 2
    assert sorted(p.name for p in tmp_path.glob("train-0*")) == [
        "train-00000-of-00002",
        "train-00001-of-00002",
    ]
    assert (tmp_path / "train-x-00000-of-00001").read_bytes() == other
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert sorted(manifest["splits"]) == ["train", "train-x"]
    assert sorted(manifest["shards"]) == [
        "train-00000-of-00002",
        "train-00001-of-00002",
        "train-x-00000-of-00001",
    ]


def test_write_dataset_info_keeps_other_splits_only_of_the_same_classes(tmp_path):
    from cvbench.data.dataset_info import ClassInfo, DatasetInfo, write_dataset_info

    def info(split, names, count):
        classes = tuple(ClassInfo(i, n, {split: count}) for i, n in enumerate(names, start=1))
        return DatasetInfo(kind="coco", classes=classes, splits={split: count})

    write_dataset_info(tmp_path, info("train", ["cat", "dog"], 5))
    write_dataset_info(tmp_path, info("val", ["cat", "dog"], 2))
    both = read_dataset_info(tmp_path)
    assert dict(both.splits) == {"train": 5, "val": 2}
    assert [dict(c.images) for c in both.classes] == [{"train": 5, "val": 2}] * 2
    # Another data set (other names) replaces the file: its classes never mix with train's.
    write_dataset_info(tmp_path, info("val", ["owl", "dog"], 3))
    assert read_dataset_info(tmp_path) == info("val", ["owl", "dog"], 3)


def test_a_second_build_into_a_folder_being_built_is_refused(tmp_path, user_files, capsys):
    # Two builds at once into one folder (train in one terminal, val in another) would lose
    # each other's manifest entries: the second is refused while the first holds the folder.
    import subprocess
    import sys

    train, val = user_files
    out = tmp_path / "out"
    assert build(out, ("train", train)) == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
         "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
         "time.sleep(120)", str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert build(out, ("val", val)) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"cvbench: error: {out} is being written by another build at this moment; wait "
            "for it to end, then rerun this one (each adds its own splits)"
        )
        assert not list(out.glob("coco_val*"))
    finally:
        holder.kill()
        holder.wait()
    assert build(out, ("val", val)) == 0  # the lock went with the process
    assert dict(read_dataset_info(out).splits) == {"train": 5, "val": 3}
