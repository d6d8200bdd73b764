"""DALI index files: our writer against DALI's `tfrecord2idx`, the layout, stale and missing
indexes, truncated shards."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dali_records import LAYOUT, write_records

from cvbench.data.dali_index import (
    index_path,
    read_index,
    record_entries,
    write_index,
)
from cvbench.data.read.splits import every_split_files


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return write_records(tmp_path_factory.mktemp("records"))


def test_index_equals_dalis_tfrecord2idx(records, tmp_path):
    shard = records / "validation-00000-of-00002"
    script = Path(sys.executable).parent / "tfrecord2idx"  # installed by nvidia-dali
    theirs = tmp_path / "theirs.idx"
    subprocess.run([sys.executable, str(script), str(shard), str(theirs)], check=True)
    ours = index_path(shard)
    assert ours == records / "idx" / "validation-00000-of-00002.idx"
    assert ours.read_text() == theirs.read_text()
    # 3 records, each framed as 8 + 4 + len + 4 bytes, back to back from offset 0.
    entries = record_entries(shard)
    assert len(entries) == 3 and entries[0][0] == 0
    assert entries[1][0] == entries[0][1] and entries[2][0] == sum(s for _, s in entries[:2])
    assert sum(s for _, s in entries) == shard.stat().st_size


def test_index_file_gets_the_umask_mode(records, tmp_path):
    old = os.umask(0o027)
    try:
        path, count = write_index(records / "train-00000-of-00002", tmp_path / "a.idx")
    finally:
        os.umask(old)
    assert count == 3 and path.stat().st_mode & 0o777 == 0o640  # 0o666 & ~0o027
    # No temporary left; the index is recorded as cvbench's in the folder's outputs list.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".cvbench-outputs.json", "a.idx"]


def test_missing_index_names_the_file_and_the_command(tmp_path):
    root = write_records(tmp_path / "data", index=False)
    shard = root / "train-00000-of-00002"
    with pytest.raises(FileNotFoundError) as e:
        read_index(shard)
    message = str(e.value)
    assert str(root / "idx" / "train-00000-of-00002.idx") in message
    assert f"cvbench dali-index {root}" in message


def test_stale_index_is_an_error(tmp_path):
    root = write_records(tmp_path / "data")
    shard = root / "train-00000-of-00002"
    with open(shard, "ab") as f:  # the shard grew (rebuilt) after indexing
        f.write((root / "train-00001-of-00002").read_bytes())
    with pytest.raises(ValueError, match="is stale: its 3 records end at byte"):
        read_index(shard)
    write_index(shard)
    assert len(read_index(shard)) == 6


def test_truncated_shard_is_not_indexed(tmp_path):
    root = write_records(tmp_path / "data", index=False)
    shard = root / "train-00000-of-00002"
    shard.write_bytes(shard.read_bytes()[:-5])
    with pytest.raises(ValueError, match="is truncated: 2 complete records"):
        write_index(shard)
    assert not index_path(shard).exists()


def test_shard_files_lists_every_split_not_the_indexes(records):
    assert [Path(p).name for p in every_split_files(records)] == sorted(LAYOUT)
