"""`build_imagenet` writes the DALI index file of every shard (idx/<shard>.idx)."""

from imagenet_testdata import NUM_TRAIN_RECORDS, NUM_VAL_RECORDS, make_raw

from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.dali_index import index_path, read_index, record_entries
from cvbench.data.read.splits import every_split_files


def test_build_writes_an_index_per_shard(tmp_path):
    make_raw(tmp_path / "raw", val_layout="folders")
    out = tmp_path / "out"
    summary = build_imagenet(
        tmp_path / "raw", out, train_shards=3, val_shards=2, num_workers=1, progress=False
    )
    shards = every_split_files(out)
    assert len(shards) == 5  # 3 training + 2 validation shards
    for shard in shards:
        assert index_path(shard).parent == out / "idx"
        assert read_index(shard) == record_entries(shard)
    total = NUM_TRAIN_RECORDS + NUM_VAL_RECORDS  # 15 + 6
    assert summary.index.written == 5 and summary.index.records == total
    assert f"DALI index files: 5 written ({total} records)" in summary.format()
    # A rerun reuses the shards and keeps their (fresh) indexes.
    again = build_imagenet(
        tmp_path / "raw", out, train_shards=3, val_shards=2, num_workers=1, progress=False
    )
    assert (again.index.written, again.index.kept) == (0, 5)
