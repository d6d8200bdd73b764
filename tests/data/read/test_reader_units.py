"""The reader skeleton's units one at a time (`cvbench.data.read.reader`): shard listing and its
messages, truncated files at start-up, rank segments, the interleave order, lost-records
markers and the determinism each reading mode asks of `tf.data`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tensorflow as tf

from cvbench.data.read.corrupt import CorruptRecordCounter
from cvbench.data.read.reader import (
    Segment,
    drop_lost_markers,
    eval_examples,
    list_split_files,
    rank_segments,
    read_records,
    scan_files,
    split_glob,
    train_examples,
)


def _write(path, values) -> str:
    with tf.io.TFRecordWriter(str(path)) as w:
        for v in values:
            w.write(v.encode())
    return str(path)


def _records(ds) -> list[tuple[str, int, int]]:
    """(record, index, lost) of each element."""
    return [(e["record"].decode(), int(e["index"]), int(e["lost"])) for e in ds.as_numpy_iterator()]


def _corrupt_last_record(path, values) -> None:
    # Each record: 8 (length) + 4 (length CRC) + data + 4 (data CRC). Flip the first data byte
    # of the last record, so its data CRC no longer matches.
    data = bytearray(Path(path).read_bytes())
    data[sum(16 + len(v) for v in values[:-1]) + 12] ^= 0xFF
    Path(path).write_bytes(bytes(data))


def test_split_glob_matches_the_shard_names_and_escapes_the_split():
    digits = "[0-9]" * 5  # the indexes check_shard_set reads: five digits
    assert split_glob("train") == f"train-{digits}-of-{digits}"
    # A split name with glob characters is matched literally ("[" escaped as "[[]").
    assert split_glob("a[1]") == f"a[[]1]-{digits}-of-{digits}"


def test_list_split_files_sorted_shards_of_the_split_only(tmp_path):
    for name in ["train-00001-of-00002", "train-00000-of-00002", "validation-00000-of-00001"]:
        (tmp_path / name).write_bytes(b"x")  # not 0 bytes: a truncated copy
    (tmp_path / "train-extra").write_bytes(b"")  # not a shard name
    (tmp_path / "train-00002-of-00002").mkdir()  # a directory is not a file
    expected = [str(tmp_path / "train-00000-of-00002"), str(tmp_path / "train-00001-of-00002")]
    assert list_split_files(tmp_path, "train") == expected
    assert list_split_files(tmp_path, "train", "valid*") == [
        str(tmp_path / "validation-00000-of-00001")
    ]


def test_list_split_files_says_what_was_looked_for_and_what_is_there(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list_split_files(tmp_path / "missing", "train")
    (tmp_path / "notes.txt").write_bytes(b"")
    # the shards' names as a reader of the message reads them (the glob is digit classes)
    message = f"no TFRecord files matching 'train-?????-of-?????' in {tmp_path}"
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        list_split_files(tmp_path, "train")  # no shard-like file: no hint
    (tmp_path / "validation-00000-of-00001").write_bytes(b"")
    (tmp_path / "test-00000-of-00002").write_bytes(b"")
    # The hint names the splits (the part before the first "-") of the "-of-" files only.
    hint = "; shard files present for: test, validation"
    with pytest.raises(FileNotFoundError, match=re.escape(message + hint) + "$"):
        list_split_files(tmp_path, "train")


def test_scan_files_raises_on_a_truncated_file_or_counts_its_lost_tail(tmp_path, capsys):
    good = _write(tmp_path / "good", ["a", "b"])
    cut = _write(tmp_path / "cut", ["c", "d", "e"])
    Path(cut).write_bytes(
        Path(cut).read_bytes()[:-3]
    )  # 2 complete records, then 14 of record 3's 17 bytes
    assert scan_files([good], skip_corrupt=False, counter=None) == [2]
    with pytest.raises(ValueError, match=f"{re.escape(cut)} is truncated.*skip_corrupt=True"):
        scan_files([good, cut], skip_corrupt=False, counter=None)
    counter = CorruptRecordCounter()
    assert scan_files([good, cut], skip_corrupt=True, counter=counter) == [2, 2]
    assert counter.count == 1  # the cut-off record
    assert "cvbench: skipped corrupt input: TFRecord file" in capsys.readouterr().err
    assert scan_files([cut], skip_corrupt=True, counter=None) == [2]  # no counter: no count


def test_rank_segments_exact_slices_across_files_with_an_empty_one():
    files, counts = ["a", "b", "c"], [3, 0, 3]
    # 6 records, 3 ranks: rank r reads records [2r, 2r + 2) of a0 a1 a2 c0 c1 c2; the empty
    # file b and the files a rank does not touch give no segment (not one of take 0).
    assert [rank_segments(files, counts, 3, r) for r in range(3)] == [
        [Segment("a", 0, 2)],
        [Segment("a", 2, 1), Segment("c", 0, 1)],
        [Segment("c", 1, 2)],
    ]
    # 7 records, 2 ranks: [0, 3) and [3, 7), the boundary at the end of file a.
    assert [rank_segments(files, [3, 0, 4], 2, r) for r in range(2)] == [
        [Segment("a", 0, 3)],
        [Segment("c", 0, 4)],
    ]


def test_rank_segments_needs_one_count_per_file():
    with pytest.raises(ValueError):
        rank_segments(["a", "b"], [3], 1, 0)


def test_read_records_interleaves_one_record_per_file_in_turn(tmp_path):
    a = _write(tmp_path / "a", ["a0", "a1", "a2"])
    b = _write(tmp_path / "b", ["b0", "b1"])
    segments = [Segment(a, 0, 3), Segment(b, 0, 2)]
    # Default cycle_length 8 >= 2 files, block_length 1: a0 b0 a1 b1 a2.
    assert [r for r, _, _ in _records(read_records(segments))] == ["a0", "b0", "a1", "b1", "a2"]
    # One file at a time: each file read through before the next.
    one = read_records(segments, cycle_length=1)
    assert [r for r, _, _ in _records(one)] == ["a0", "a1", "a2", "b0", "b1"]
    # skip / take; `index` is the record's position in its file.
    assert _records(read_records([Segment(a, 1, 2)])) == [("a1", 1, 0), ("a2", 2, 0)]
    assert _records(read_records([])) == []  # a rank with no records


def test_read_records_keeps_the_segment_order_unless_shuffling(tmp_path):
    files = [_write(tmp_path / f"f{i}", [f"f{i}"]) for i in range(6)]
    segments = [Segment(f, 0, 1) for f in files]
    # No shuffling by default: one record per file, in file order (a shuffle of the 6 files
    # would keep this order once in 6! = 720).
    in_order = [f"f{i}" for i in range(6)]
    assert [r for r, _, _ in _records(read_records(segments))] == in_order


def test_a_lost_last_record_is_one_marker_that_raises_or_is_counted(tmp_path):
    values = ["r0", "r1", "r2"]
    path = _write(tmp_path / "f", values)
    _corrupt_last_record(path, values)
    # The reader stops at record 2: records 0 and 1, then a marker (index 2, 1 record lost).
    records = read_records([Segment(path, 0, 3)])
    assert _records(records) == [("r0", 0, 0), ("r1", 1, 0), ("", 2, 1)]
    message = (
        f"corrupted TFRecord data in {path}: the reader stopped at record 2 (CRC mismatch); "
        "1 records were not read"
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        list(drop_lost_markers(records, skip_corrupt=False, counter=None))
    counter = CorruptRecordCounter()
    kept = drop_lost_markers(records, skip_corrupt=True, counter=counter)
    assert _records(kept) == [("r0", 0, 0), ("r1", 1, 0)]
    assert counter.count == 1


def _parse(record):
    return {"value": record}


def _read(**kwargs):
    return {"cycle_length": 4, "skip_corrupt": False, "counter": None, **kwargs}


def _train(files, num_shards, shard_index, seed):
    kwargs = _read(num_shards=num_shards, shard_index=shard_index, seed=seed, repeat=False)
    return train_examples(files, _parse, **kwargs)


def _values(ds) -> list[str]:
    return [e["value"].decode() for e in ds.as_numpy_iterator()]


def test_as_many_files_as_ranks_deals_out_whole_files(tmp_path):
    # 2 files, 2 ranks: by file, rank r reads file r whole. (Splitting the records of the
    # interleave a0 b0 a1 a2 instead would give rank 0 a0 a1 and rank 1 b0 a2.)
    files = [_write(tmp_path / "a", ["a0", "a1", "a2"]), _write(tmp_path / "b", ["b0"])]
    per_rank = [_values(_train(files, 2, r, seed=1)) for r in (0, 1)]
    assert [sorted(v) for v in per_rank] == [["a0", "a1", "a2"], ["b0"]]


def test_a_rank_without_records_is_an_error_one_record_is_enough(tmp_path):
    empty = _write(tmp_path / "empty", [])
    with pytest.raises(ValueError, match="no records in the files"):
        _train([empty], 1, 0, seed=0)
    one = _write(tmp_path / "one", ["x"])
    assert _values(_train([one], 1, 0, seed=0)) == ["x"]


def _interleave_determinism(ds: tf.data.Dataset) -> list[str]:
    """The `deterministic` attribute of each interleave of the dataset's graph."""
    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(tf.raw_ops.DatasetToGraphV2(input_dataset=ds._variant_tensor).numpy())
    return [node.attr["deterministic"].s.decode() for node in graph.node if "Interleave" in node.op]


def test_which_reading_modes_ask_for_a_deterministic_interleave(tmp_path):
    files = [_write(tmp_path / f"f{i}", ["x"]) for i in range(2)]

    # By file: deterministic only when seeded (an unseeded run is allowed to be faster).
    assert _interleave_determinism(_train(files, 2, 0, seed=5)) == ["true"]
    assert _interleave_determinism(_train(files, 2, 0, seed=None)) == ["false"]
    # Fewer files than ranks: every rank must see the same interleave, or the ranks'
    # every-R-th-record splits would overlap; seeded or not.
    assert _interleave_determinism(_train(files, 3, 0, seed=None)) == ["true"]
    ds, _ = eval_examples(files, _parse, **_read(num_shards=1, shard_index=0, batch_size=1))
    assert _interleave_determinism(ds) == ["true"]


def test_read_records_reads_8_files_at_once_by_default(tmp_path):
    files = [_write(tmp_path / f"f{i}", [f"f{i}r0", f"f{i}r1"]) for i in range(9)]
    segments = [Segment(f, 0, 2) for f in files]
    # cycle_length 8: files 0..7 in turn, one record each, twice; file 8 only once a place is
    # free. (With all 9 at once, f8r0 would come right after f7r0.)
    first_pass = [f"f{i}r0" for i in range(8)] + [f"f{i}r1" for i in range(8)]
    order = [r for r, _, _ in _records(read_records(segments))]
    assert order == [*first_pass, "f8r0", "f8r1"]


def test_training_files_are_shuffled_again_each_epoch(tmp_path):
    files = [_write(tmp_path / f"f{i}", [f"f{i}"]) for i in range(6)]
    kwargs = _read(num_shards=1, shard_index=0, seed=1, repeat=True, cycle_length=1)
    values = _values(train_examples(files, _parse, **kwargs).take(12))
    # Each epoch reads every file once, in a new order (fixed by the seed: the seed-1 orders
    # differ; the same order twice is what reshuffle_each_iteration=False would give).
    first, second = values[:6], values[6:]
    assert sorted(first) == sorted(second) == [f"f{i}" for i in range(6)]
    assert first != second
