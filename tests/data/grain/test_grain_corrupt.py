"""`cvbench.data.grain.records`' corrupt-input policy: raise naming the record, or skip, print
and count each damaged record once (across processes), as the tf.data path does."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle

import pytest
from grain_records import write_split

from cvbench.data.grain.records import (
    SKIP_HINT,
    SKIPPED,
    CorruptPolicy,
    SkippedRecords,
    TFRecordSource,
    record_offsets,
)
from cvbench.data.tfrecord import scan_tfrecord
from cvbench.utils.errors import BadFileError

SIZES = [(20, 30), (31, 17), (16, 16)]

pytestmark = pytest.mark.backend_agnostic


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    """A shard of 3 records whose last 5 bytes are cut off: 2 complete records."""
    root = tmp_path_factory.mktemp("grain_corrupt")
    (whole,) = write_split(root / "whole", "train", SIZES)
    path = root / "train-00000-of-00001"
    data = whole.read_bytes()
    path.write_bytes(data[: len(data) - 5])
    return path


def test_a_skipping_policy_reads_a_truncated_files_complete_records_and_counts_its_tail_once(
    cut, capsys
):
    policy = CorruptPolicy(skip=True)
    source = TFRecordSource([cut], policy=policy)
    assert len(source) == 2 and policy.skipped.count == 1
    # the tf.data path's words (`scan_files` prints `TFRecordScan.describe()`), printed once
    expected = SKIPPED + scan_tfrecord(cut).describe() + "\n"
    assert capsys.readouterr().err == expected
    # a pipeline built again for the next epoch scans again: not printed, not counted again
    TFRecordSource([cut], policy=policy)
    assert policy.skipped.count == 1 and capsys.readouterr().err == ""


def test_without_skipping_a_truncated_file_still_raises(cut):
    for policy in (None, CorruptPolicy()):
        with pytest.raises(BadFileError, match=f"TFRecord file {cut} is truncated: 2 complete"):
            record_offsets(cut, policy=policy)


def test_the_hint_and_the_printed_prefix_are_the_tf_data_paths():
    from cvbench.data.read import corrupt

    assert SKIP_HINT == corrupt.SKIP_HINT
    counter = corrupt.CorruptRecordCounter()
    # tf.data prints "cvbench: skipped corrupt input: <message>" for a record lost before reading
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        counter.report_found_before_reading("t-0 is truncated")
    assert err.getvalue() == SKIPPED + "t-0 is truncated\n"


def test_a_raising_policy_names_the_record_and_suggests_skipping():
    with pytest.raises(BadFileError) as raised:
        CorruptPolicy().corrupt("f record 3 (a.JPEG): undecodable image (10 bytes)")
    assert str(raised.value) == (
        "f record 3 (a.JPEG): undecodable image (10 bytes); pass skip_corrupt=True to skip "
        "corrupt records"
    )


def test_each_damaged_record_counts_once_whoever_meets_it(capsys):
    skipped = SkippedRecords()
    policy = CorruptPolicy(skip=True, skipped=skipped)
    for _ in range(3):  # three epochs meet the same two damaged records
        assert policy.corrupt("f record 3: undecodable image") is None
        assert policy.corrupt("f record 7: not an ImageNet tf.train.Example") is None
    assert skipped.count == 2
    assert capsys.readouterr().err.splitlines() == [
        SKIPPED + "f record 3: undecodable image",
        SKIPPED + "f record 7: not an ImageNet tf.train.Example",
    ]


def _report_in_child(skipped: SkippedRecords, messages: list[str], queue) -> None:
    queue.put([skipped.report(m) for m in messages])


def test_records_skipped_in_worker_processes_are_counted_once_in_the_parent():
    skipped = SkippedRecords()
    assert skipped.report("f record 1: bad")
    context = multiprocessing.get_context("spawn")  # as grain's workers: the object pickles
    queue = context.Queue()
    child = context.Process(
        target=_report_in_child, args=(skipped, ["f record 1: bad", "f record 2: bad"], queue)
    )
    child.start()
    firsts = queue.get(timeout=120)
    child.join(timeout=60)
    # record 1 was met by the parent first: the child neither prints nor counts it again
    assert firsts == [False, True] and child.exitcode == 0
    assert skipped.count == 2
    assert os.path.isdir(skipped.folder)  # the child's copy did not remove the folder


def test_the_counts_folder_goes_with_the_first_processes_object_only():
    skipped = SkippedRecords()
    folder = skipped.folder
    copy = pickle.loads(pickle.dumps(skipped))
    del copy
    gc.collect()
    assert os.path.isdir(folder)
    del skipped
    gc.collect()
    assert not os.path.exists(folder)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"skip": "yes"}, "skip must be a bool, got 'yes'"),
        ({"skip": True, "skipped": 3}, "skipped must be a SkippedRecords or None, got 3"),
    ],
)
def test_bad_policy_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CorruptPolicy(**kwargs)


def test_a_raising_policy_makes_no_counter():
    assert CorruptPolicy().skipped is None
    assert isinstance(CorruptPolicy(skip=True).skipped, SkippedRecords)
