"""`build-imagenet` rebuilds (F2): an --overwrite with another shard count removes the DALI
index files cvbench wrote for the shards it deletes (they piled up) and keeps a user's; a
link in place of OUT/idx, an empty --output-dir and a fixed --resize over the pixel limit are
refused before any work; an --overwrite stopped by a full disk says the old set is gone."""

from __future__ import annotations

import os

import pytest
from imagenet_testdata import make_raw
from small_disk import SmallDisk

from cvbench.cli import main
from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.builders.sharded_writer import DiskFullError, SplitSpec, write_sharded
from cvbench.data.tfrecord import bytes_feature, encode_example

OPTIONS = {"val_shards": 1, "num_workers": 1, "progress": False}


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_overwrite_with_another_shard_count_removes_only_cvbenchs_old_index_files(tmp_path):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    out = tmp_path / "out"
    build_imagenet(raw, out, train_shards=4, **OPTIONS)
    (out / "idx" / "train-00009-of-00010.idx").write_text("a user's file\n")
    summary = build_imagenet(raw, out, train_shards=2, overwrite=True, **OPTIONS)
    assert summary.index.written == 3
    assert _names(out / "idx") == [
        ".cvbench-outputs.json",
        "train-00000-of-00002.idx",
        "train-00001-of-00002.idx",
        "train-00009-of-00010.idx",  # not cvbench's: kept
        "validation-00000-of-00001.idx",
    ]


@pytest.mark.parametrize("what", ["link", "file"])
def test_a_link_or_file_in_place_of_idx_is_refused_before_any_shard(tmp_path, capsys, what):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    if what == "link":
        (out / "idx").symlink_to(victim)
        line = (
            f"{out}/idx is a symbolic link; cvbench writes only into folders it made, never "
            "through a link: remove it"
        )
    else:
        (out / "idx").write_text("mine\n")
        line = f"{out}/idx: is a file, not a folder"
    argv = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(out), "--no-progress"]
    assert main([*argv, "--train-shards", "2", "--val-shards", "1", "--workers", "1"]) == 1
    assert capsys.readouterr().err == f"cvbench build-imagenet: error: {line}\n"
    assert _names(out) == ["idx"] and _names(victim) == []


def test_an_empty_output_dir_and_a_resize_over_the_pixel_limit_are_refused(
    tmp_path, capsys, monkeypatch
):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    monkeypatch.chdir(tmp_path)
    argv = ["build-imagenet", "--raw-dir", str(raw), "--no-progress"]
    with pytest.raises(SystemExit) as usage:  # argparse's usage error (exit 2)
        main([*argv, "--output-dir", ""])
    assert usage.value.code == 2
    assert capsys.readouterr().err == (
        "cvbench build-imagenet: error: argument --output-dir: the path is empty: name the "
        "folder to write (. for the current one) (see cvbench build-imagenet --help)\n"
    )
    assert main([*argv, "--output-dir", "out", "--resize", "8001x8000"]) == 2
    assert capsys.readouterr().err == (
        "cvbench: error: --resize 8001x8000 makes images of 64,008,000 pixels, over the limit "
        "of 64,000,000 (--max-pixels); choose a smaller size\n"
    )
    assert main([*argv, "--output-dir", "out", "--resize", "4x5", "--max-pixels", "19"]) == 2
    assert capsys.readouterr().err == (
        "cvbench: error: --resize 4x5 makes images of 20 pixels, over the limit of 19 "
        "(--max-pixels); choose a smaller size\n"
    )
    assert main([*argv, "--output-dir", "out", "--resize", "65536x1"]) == 2
    assert capsys.readouterr().err == (
        "cvbench: error: --resize 65536x1 has a side over 65,535 pixels, the most a JPEG can "
        "hold; choose a smaller size\n"
    )
    assert _names(tmp_path) == ["raw"]  # nothing written, no folder made
    with pytest.raises(ValueError, match="the output folder is empty"):  # the Python API
        build_imagenet(raw, "", num_workers=1, progress=False)
    with pytest.raises(ValueError, match="the output folder is empty"):
        write_sharded("", [SplitSpec("train", [1], 1)], _encode, dataset="n", num_workers=1)


def _encode(n: int) -> bytes:
    return encode_example({"b": bytes_feature(b"x" * n)})


def test_an_overwrite_stopped_by_a_full_disk_says_the_old_set_is_gone(tmp_path):
    disk = SmallDisk(tmp_path / "mnt")
    try:
        mnt = disk.mount(64 << 10)
        out = mnt / "out"
        small = {"dataset": "n", "num_workers": 1, "progress": False}
        write_sharded(out, [SplitSpec("train", [100, 100], 2)], _encode, **small)
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # fill the disk to its last page
            with pytest.raises(OSError, match="No space left"):
                while True:
                    os.write(fd, b"x" * 4096)
        finally:
            os.close(fd)
        with pytest.raises(DiskFullError) as caught:  # 3 pages a shard, 2 freed
            write_sharded(
                out, [SplitSpec("train", [10000, 10000], 2)], _encode, overwrite=True, **small
            )
        assert (caught.value.finished_shards, caught.value.removed_shards) == (0, 2)
        assert str(caught.value) == (
            f"no space left on device writing {out}/train-00000-of-00002; overwrite "
            "(--overwrite) had deleted the 2 shards of the data set it replaces before "
            "writing; 0 finished shards of the new one are intact; free space and rerun "
            "without --overwrite to resume (with it, the build starts over)"
        )
    finally:
        disk.unmount()


def test_overwrite_refuses_a_users_index_file_before_any_shard(tmp_path, capsys):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    out = tmp_path / "out"
    (out / "idx").mkdir(parents=True)
    theirs = out / "idx" / "train-00001-of-00002.idx"
    theirs.write_text("a user's file\n")
    argv = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(out), "--no-progress"]
    argv += ["--train-shards", "2", "--val-shards", "1", "--workers", "1", "--overwrite"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"cvbench: error: {theirs} exists and was not written by cvbench; --overwrite "
        "replaces only cvbench's own outputs: move it or write elsewhere\n"
    )
    assert _names(out) == ["idx"] and _names(out / "idx") == [theirs.name]
