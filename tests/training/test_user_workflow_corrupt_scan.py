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
