"""The generic shard writer: shard layout, manifest, resume, refusal, atomicity, skips."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from cvbench.data.builders.manifest import MANIFEST_NAME, shard_glob
from cvbench.data.builders.sharded_writer import Skip, SplitSpec, shard_ranges, write_sharded
from cvbench.data.tfrecord import encode_example, int64_feature, iter_tfrecord


def encode_number(n: int) -> bytes | Skip:
    """Items are ints; multiples of 7 are 'unreadable'."""
    if n % 7 == 0:
        return Skip(f"{n} is a multiple of 7")
    return encode_example({"n": int64_feature(n)})


def _numbers(path) -> list[int]:
    import tensorflow as tf

    return [
        tf.train.Example.FromString(r).features.feature["n"].int64_list.value[0]
        for r in iter_tfrecord(path)
    ]


def _write(out, items=tuple(range(1, 11)), shards=3, **kwargs):
    kwargs.setdefault("num_workers", 1)
    kwargs.setdefault("progress", False)
    return write_sharded(
        out, [SplitSpec("train", list(items), shards)], encode_number, dataset="numbers", **kwargs
    )


def test_shard_ranges_are_contiguous_and_balanced():
    # 10 items, 4 shards: 10 = 4 * 2 + 2, so the first two shards get 3 items.
    assert shard_ranges(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert shard_ranges(3, 3) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="num_shards must be >= 1, got 0"):
        shard_ranges(3, 0)


def test_shard_glob_matches_any_index_and_count():
    assert shard_glob("{split}-{index:05d}-of-{num_shards:05d}", "train") == "train-*-of-*"
    assert shard_glob("coco_{split}.record-{index:05d}-of-{num_shards:05d}", "val") == (
        "coco_val.record-*-of-*"
    )


def test_writes_named_shards_with_records_in_order_and_collects_skips(tmp_path):
    summary = _write(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        MANIFEST_NAME,
        "train-00000-of-00003",
        "train-00001-of-00003",
        "train-00002-of-00003",
    ]
    # 10 items in 3 shards: [1..4], [5..7], [8..10]; 7 is skipped.
    assert _numbers(tmp_path / "train-00000-of-00003") == [1, 2, 3, 4]
    assert _numbers(tmp_path / "train-00001-of-00003") == [5, 6]
    assert _numbers(tmp_path / "train-00002-of-00003") == [8, 9, 10]
    result = summary.splits["train"]
    assert (result.num_items, result.num_records, result.shards_written) == (10, 9, 3)
    assert [(s.item, s.reason) for s in summary.skipped] == [("7", "7 is a multiple of 7")]
    assert result.num_bytes == sum(p.stat().st_size for p in tmp_path.glob("train-*"))
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["dataset"] == "numbers"
    assert manifest["shards"]["train-00001-of-00003"]["records"] == 2
    assert "skipped: 1" in summary.format()


def test_rerun_writes_only_the_missing_shard(tmp_path):
    _write(tmp_path)
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in tmp_path.glob("train-*")}
    removed = tmp_path / "train-00001-of-00003"
    content = removed.read_bytes()
    removed.unlink()
    # A temporary file left by a killed run is cleaned up.
    stale = tmp_path / ".train-00002-of-00003.abc.tmp"
    stale.write_bytes(b"partial")

    summary = _write(tmp_path)
    result = summary.splits["train"]
    assert (result.shards_written, result.shards_reused) == (1, 2)
    assert summary.items_processed == 3  # only items 5, 6, 7
    assert removed.read_bytes() == content
    for name, stamp in before.items():
        if name != removed.name:
            path = tmp_path / name
            assert (path.stat().st_ino, path.stat().st_mtime_ns) == stamp
    assert not stale.exists()
    # The skip found by the first run is still reported.
    assert [s.item for s in summary.skipped] == ["7"]


def test_a_shard_whose_size_changed_is_rewritten(tmp_path):
    _write(tmp_path)
    shard = tmp_path / "train-00000-of-00003"
    shard.write_bytes(shard.read_bytes()[:-3])
    summary = _write(tmp_path)
    assert summary.splits["train"].shards_written == 1
    assert _numbers(shard) == [1, 2, 3, 4]


def test_a_different_data_set_is_refused_without_overwrite(tmp_path):
    _write(tmp_path)
    with pytest.raises(FileExistsError, match=r"different data set .*options.quality"):
        _write(tmp_path, options={"quality": 75})
    with pytest.raises(FileExistsError, match="items_sha256"):
        _write(tmp_path, items=range(2, 12))
    with pytest.raises(FileExistsError, match="num_shards: 3 -> 2"):
        _write(tmp_path, shards=2)
    summary = _write(tmp_path, shards=2, overwrite=True)
    assert sorted(p.name for p in tmp_path.glob("train-*")) == [
        "train-00000-of-00002",
        "train-00001-of-00002",
    ]
    assert summary.splits["train"].shards_written == 2


def test_shards_without_a_manifest_are_not_overwritten(tmp_path):
    (tmp_path / "train-00000-of-00001").write_bytes(b"someone else's")
    with pytest.raises(FileExistsError, match="no cvbench_manifest.json"):
        _write(tmp_path)
    assert (tmp_path / "train-00000-of-00001").read_bytes() == b"someone else's"


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"must be in 1..3, got 4"):
        _write(tmp_path, items=[1, 2, 3], shards=4)
    with pytest.raises(ValueError, match="distinct"):
        write_sharded(
            tmp_path, [SplitSpec("a", [1], 1), SplitSpec("a", [2], 1)], encode_number, dataset="x"
        )
    with pytest.raises(ValueError, match="picklable"):
        write_sharded(
            tmp_path,
            [SplitSpec("train", [1], 1)],
            lambda n: b"",  # a lambda cannot travel to a worker process
            dataset="x",
            num_workers=2,
            progress=False,
        )


def test_an_error_leaves_no_partial_shard(tmp_path):
    def failing(n: int) -> bytes:
        if n == 6:
            raise RuntimeError("encoder bug")
        return encode_example({"n": int64_feature(n)})

    with pytest.raises(RuntimeError, match="encoder bug"):
        write_sharded(
            tmp_path,
            [SplitSpec("train", list(range(1, 11)), 3)],
            failing,
            dataset="numbers",
            num_workers=1,
            progress=False,
        )
    # Shard 0 (items 1-4) finished; shard 1 (5-7) failed at 6 and left nothing behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST_NAME, "train-00000-of-00003"]


_KILLED_BUILD = """
import sys, time
from cvbench.data.builders.sharded_writer import SplitSpec, write_sharded
from cvbench.data.tfrecord import encode_example, bytes_feature

def slow(n):
    time.sleep(0.05)
    return encode_example({"blob": bytes_feature(bytes(200_000))})

if __name__ == "__main__":
    write_sharded(sys.argv[1], [SplitSpec("train", list(range(40)), 8)], slow,
                  dataset="slow", num_workers=1, progress=False)
"""


@pytest.mark.slow
def test_sigkill_mid_build_then_rerun_completes_only_missing_shards(tmp_path):
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent(_KILLED_BUILD))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(script), str(out)])
    manifest = out / MANIFEST_NAME
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until two of the eight shards are done
        if manifest.exists():
            try:
                if len(json.loads(manifest.read_text())["shards"]) >= 2:
                    break
            except ValueError:
                pass
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = json.loads(manifest.read_text())["shards"]
    assert 2 <= len(done) < 8
    finished = sorted(p.name for p in out.glob("train-*"))
    # Every file with a shard's name is a whole shard: 5 records of 200,000 bytes, and the
    # only shards on disk are those the manifest lists, or the one renamed just before the kill.
    assert set(done) <= set(finished) and len(finished) <= len(done) + 1
    for name in finished:
        assert len(list(iter_tfrecord(out / name))) == 5

    from cvbench.data.builders.sharded_writer import write_sharded as again

    sys.path.insert(0, str(tmp_path))
    try:
        import build as killed_build  # the same encode function, importable by name

        summary = again(
            out,
            [SplitSpec("train", list(range(40)), 8)],
            killed_build.slow,
            dataset="slow",
            num_workers=1,
            progress=False,
        )
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("build", None)
    assert summary.splits["train"].shards_reused == len(done)
    assert summary.splits["train"].shards_written == 8 - len(done)
    assert summary.splits["train"].num_records == 40
    assert not list(out.glob(".*tmp*"))


_UNGUARDED_SCRIPT = """
import sys
from cvbench.data.builders.sharded_writer import SplitSpec, write_sharded
from cvbench.data.tfrecord import encode_example, int64_feature

def encode(n):
    return encode_example({"n": int64_feature(n)})

# No `if __name__ == "__main__":` guard: each spawned worker runs this again.
write_sharded(sys.argv[1], [SplitSpec("train", list(range(4)), 2)], encode,
              dataset="x", num_workers=2, progress=False)
"""


@pytest.mark.slow
def test_script_without_main_guard_fails_with_advice_instead_of_hanging(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(_UNGUARDED_SCRIPT))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=240,  # multiprocessing.Pool would restart the dying workers forever
    )
    assert proc.returncode != 0
    assert 'if __name__ == "__main__":' in proc.stderr and "num_workers=1" in proc.stderr


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_shards_and_manifest_get_the_mode_open_would_give(tmp_path, umask, mode):
    # Before the fix every output was 0o600 (tempfile.mkstemp's mode), whatever the umask.
    old = os.umask(umask)
    try:
        _write(tmp_path / "out")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert modes == {
        MANIFEST_NAME: mode,
        "train-00000-of-00003": mode,
        "train-00001-of-00003": mode,
        "train-00002-of-00003": mode,
    }


def test_metadata_is_stored_and_replaced_but_is_not_identity(tmp_path):
    _write(tmp_path, metadata={"classes": 3})
    assert json.loads((tmp_path / MANIFEST_NAME).read_text())["metadata"] == {"classes": 3}
    summary = _write(tmp_path, metadata={"classes": 4})  # same data set: nothing rewritten
    assert summary.splits["train"].shards_reused == 3
    assert json.loads((tmp_path / MANIFEST_NAME).read_text())["metadata"] == {"classes": 4}
    _write(tmp_path)
    assert "metadata" not in json.loads((tmp_path / MANIFEST_NAME).read_text())
