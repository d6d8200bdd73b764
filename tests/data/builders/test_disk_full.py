"""A builder that fills the disk (ENOSPC, on a small tmpfs): a clear one-line error, the
finished shards whole and loadable, and a rerun with space that equals a build that never
stopped."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from imagenet_testdata import NUM_TRAIN_RECORDS, NUM_VAL_RECORDS, make_raw
from small_disk import SmallDisk

from cvbench.cli import main
from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.builders.manifest import MANIFEST_NAME
from cvbench.data.builders.sharded_writer import DiskFullError, SplitSpec, write_sharded
from cvbench.data.tfrecord import encode_example, int64_feature, scan_tfrecord

PAGE = 4096  # tmpfs counts whole pages


def _pages(path: Path) -> int:
    return math.ceil(path.stat().st_size / PAGE)


@pytest.fixture
def small_tmpfs(tmp_path):
    """Returns (mount point, resize(bytes)); the first resize mounts it; unmounted at the end."""
    disk = SmallDisk(tmp_path / "mnt")
    try:
        yield disk.path, disk.mount
    finally:
        disk.unmount()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_full_disk_stops_cleanly_and_the_rerun_resumes(tmp_path, small_tmpfs, capsys):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    options = {"train_shards": 4, "val_shards": 2, "num_workers": 1, "progress": False}
    reference = tmp_path / "reference"
    build_imagenet(raw, reference, **options)
    shards = [f"train-{i:05d}-of-00004" for i in range(4)]
    shards += [f"validation-{i:05d}-of-00002" for i in range(2)]
    assert sorted(_files(reference)) == sorted([MANIFEST_NAME, "dataset_info.json", *shards])

    # Room for train-00000 and train-00001 and, while the manifest is replaced, two manifests
    # (the old one and its successor; the last manifest is the largest). train-00002 needs
    # 2 pages more than the one left, so it is the shard that hits ENOSPC.
    sizes = {name: _pages(reference / name) for name in shards}
    assert sizes["train-00002-of-00004"] >= 2  # the premise: it cannot fit in one page
    room = sizes[shards[0]] + sizes[shards[1]] + 2 * _pages(reference / MANIFEST_NAME)
    mnt, resize = small_tmpfs
    resize(room * PAGE)
    out = mnt / "out"

    argv = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(out)]
    argv += ["--train-shards", "4", "--val-shards", "2", "--workers", "1", "--no-progress"]
    assert main(argv) == 1  # an OSError at run time
    err = capsys.readouterr().err
    assert err == (
        f"cvbench build-imagenet: error: no space left on device writing "
        f"{out}/train-00002-of-00004; "
        "2 finished shards are intact; free space and rerun to resume\n"
    )
    # The partial shard's temporary file is gone; the two finished shards are whole, listed
    # in the manifest, and byte for byte those of the build that had room.
    assert sorted(_files(out)) == [MANIFEST_NAME, shards[0], shards[1]]
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert sorted(manifest["shards"]) == shards[:2]
    for name in shards[:2]:
        scan = scan_tfrecord(out / name)
        assert (scan.num_records, scan.truncated) == (manifest["shards"][name]["records"], False)
        assert (out / name).read_bytes() == (reference / name).read_bytes()

    # The Python API raises the same error, with the numbers as attributes.
    with pytest.raises(DiskFullError) as caught:
        build_imagenet(raw, out, **options)
    assert (caught.value.path, caught.value.finished_shards) == (out / shards[2], 2)
    assert caught.value.errno == 28  # ENOSPC

    resize(4 << 20)  # space is back
    summary = build_imagenet(raw, out, **options)
    train, val = summary.write.splits["train"], summary.write.splits["validation"]
    assert (train.shards_reused, train.shards_written, val.shards_written) == (2, 2, 2)
    assert (train.num_records, val.num_records) == (NUM_TRAIN_RECORDS, NUM_VAL_RECORDS)
    assert _files(out) == _files(reference)  # shards and manifest, byte for byte
    assert _files(out / "idx") == _files(reference / "idx")  # and the DALI index files


def test_a_full_disk_error_names_the_manifest_when_that_fails(tmp_path, small_tmpfs):
    mnt, resize = small_tmpfs
    resize(PAGE)
    (mnt / "filler").write_bytes(b"x" * PAGE)  # the disk is full before anything is written
    with pytest.raises(DiskFullError) as caught:
        write_sharded(
            mnt / "out",
            [SplitSpec("train", [1, 2], 1)],
            _encode,
            dataset="numbers",
            num_workers=1,
            progress=False,
        )
    assert str(caught.value) == (
        f"no space left on device writing {mnt}/out/{MANIFEST_NAME}; 0 finished shards are "
        "intact; free space and rerun to resume"
    )
    assert sorted(p.name for p in (mnt / "out").iterdir()) == []


def _encode(n: int) -> bytes:
    return encode_example({"n": int64_feature(n)})
