"""A truncated file found again by each epoch's scan (the training pipeline is built again
for every epoch) is printed and counted once (`reader.scan_files` through
`CorruptRecordCounter.report_found_before_reading`); a lost-records marker says "CRC
mismatch" (the scan already tells truncation)."""

from __future__ import annotations

import pytest

from cvbench.data import CorruptRecordCounter
from cvbench.data.read.reader import scan_files
from cvbench.utils.errors import BadFileError


def write_records(path, payloads: list[bytes]) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for payload in payloads:
            writer.write(payload)


def test_a_truncated_file_is_printed_and_counted_once_over_epochs(tmp_path, capsys):
    path = tmp_path / "train-00000-of-00001"
    write_records(path, [b"a" * 10, b"b" * 10, b"c" * 10])
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # the third record cut off: 2 complete records
    counter = CorruptRecordCounter()
    for _ in range(3):  # three epochs' pipelines
        assert scan_files([str(path)], skip_corrupt=True, counter=counter) == [2]
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "skipped corrupt input" in line]
    assert len(lines) == 1 and str(path) in lines[0]
    assert counter.count == 1
    # Without a counter it is still said (each time: nothing remembers it).
    scan_files([str(path)], skip_corrupt=True, counter=None)
    assert "skipped corrupt input" in capsys.readouterr().err
    with pytest.raises(BadFileError, match="skip_corrupt=True"):
        scan_files([str(path)], skip_corrupt=False, counter=None)


def test_a_crc_damaged_record_is_named_a_crc_mismatch(tmp_path):
    import tensorflow as tf

    from cvbench.data.read.reader import Segment, drop_lost_markers, read_records

    path = tmp_path / "train-00000-of-00001"
    write_records(path, [b"a" * 10, b"b" * 10, b"c" * 10])
    data = bytearray(path.read_bytes())
    data[12 + 10 + 4 + 12] ^= 0xFF  # the second record's first data byte: its CRC fails
    path.write_bytes(bytes(data))
    records = read_records([Segment(str(path), 0, 3)])
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        list(drop_lost_markers(records, skip_corrupt=False, counter=None).as_numpy_iterator())
    assert (
        f"corrupted TFRecord data in {path}: the reader stopped at record 1 (CRC mismatch); "
        "2 records were not read"
    ) in str(error.value)


def damaged_file(tmp_path, bad: tuple[int, ...]):
    """10 records of 10 bytes ('a' * 10, 'b' * 10, ...), the data of records `bad` damaged."""
    path = tmp_path / "train-00000-of-00001"
    write_records(path, [bytes([97 + i]) * 10 for i in range(10)])
    data = bytearray(path.read_bytes())
    for k in bad:
        data[k * (12 + 10 + 4) + 12] ^= 0xFF  # its first data byte: the data CRC fails
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    ("skip", "take", "expected"),
    [
        (0, 10, [0, 1, 3, 4, 5, 7, 8, 9]),  # records 2 and 6 damaged: each alone lost
        (3, 5, [3, 4, 5, 7]),  # a segment after a damaged record: read (it was lost whole)
        (7, 3, [7, 8, 9]),
    ],
)
def test_skipping_reads_on_after_each_crc_damaged_record(tmp_path, capfd, skip, take, expected):
    from cvbench.data.read.reader import Segment, drop_lost_markers, read_records

    path = damaged_file(tmp_path, (2, 6))
    counter = CorruptRecordCounter()
    records = read_records([Segment(str(path), skip, take)], read_past_damage=True)
    out = list(drop_lost_markers(records, skip_corrupt=True, counter=counter).as_numpy_iterator())
    assert [int(e["index"]) for e in out] == expected
    assert [e["record"] for e in out] == [bytes([97 + i]) * 10 for i in expected]
    lost = take - len(expected)  # exactly the damaged records in the segment
    assert counter.count == lost
    warnings = [line for line in capfd.readouterr().err.splitlines() if "corrupt in" in line]
    assert len(warnings) == lost and all("1 records were not read" in w for w in warnings)


def test_training_and_evaluation_lose_only_the_damaged_records(tmp_path):
    from cvbench.data.read.reader import eval_examples, train_examples

    path = damaged_file(tmp_path, (2, 6))
    common = dict(num_shards=1, shard_index=0, cycle_length=2, skip_corrupt=True)

    def parse(record):
        return {"data": record}

    counter = CorruptRecordCounter()
    train = train_examples(
        [str(path)], parse, seed=0, repeat=False, counter=counter, **common
    )  # fmt: skip
    assert sorted(int(e["index"]) for e in train.as_numpy_iterator()) == [0, 1, 3, 4, 5, 7, 8, 9]
    assert counter.count == 2
    counter = CorruptRecordCounter()
    examples, steps = eval_examples([str(path)], parse, batch_size=4, counter=counter, **common)
    assert [int(e["index"]) for e in examples.as_numpy_iterator()] == [0, 1, 3, 4, 5, 7, 8, 9]
    assert steps == 3 and counter.count == 2  # 10 records / 4 a batch, 2 skipped
