"""The outputs list as a base and appended record lines (`cvbench.utils.files`): recording
n files writes and reads O(n) bytes, not O(n^2); a torn line, an interrupted rewrite, an
older cvbench's list and concurrent recorders lose no entry and claim nothing cvbench did not
write."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from replace_helpers import interrupted_replace

import cvbench.utils.files as files
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import OUTPUTS_LIST, record_output, recording, written_by_cvbench
from cvbench.utils.io import write_json_atomic

pytestmark = pytest.mark.backend_agnostic


def entry(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def line(name: str, data: bytes | None) -> bytes:
    """The record line this cvbench appends for `name` (None: removed)."""
    value = None if data is None else entry(data)
    return json.dumps([name, value], sort_keys=True, separators=(",", ":")).encode() + b"\n"


def write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


class Counter:
    """Bytes the list's writers write and its readers read, and the rewrites."""

    def __init__(self, monkeypatch):
        self.written = self.read = self.rewrites = 0
        append, rewrite, span = files._append_line, files._rewrite_list, files._read_span

        def counted_append(fd, text):
            self.written += len(text)
            append(fd, text)

        def counted_rewrite(listing, entries):
            self.rewrites += 1
            rewrite(listing, entries)
            self.written += listing.stat().st_size

        def counted_span(fd, start, end):
            data = span(fd, start, end)
            self.read += len(data)
            return data

        monkeypatch.setattr(files, "_append_line", counted_append)
        monkeypatch.setattr(files, "_rewrite_list", counted_rewrite)
        monkeypatch.setattr(files, "_read_span", counted_span)


@pytest.mark.parametrize("floor", [0, 64 << 10])
def test_recording_n_files_writes_and_reads_linear_bytes(tmp_path, monkeypatch, floor):
    """n = 1,000 records. Each line is at most L bytes. A rewrite comes when the lines since
    the last one (with the new line: J) outgrow max(base B, floor), and writes B' <= B + J
    (a base entry is shorter than its line) < 2J; the J's add up to at most nL, so rewrites
    write at most 2nL and everything at most 3nL (rewriting per record wrote about n^2 L / 2).
    Reads: each line once after its append, 64 tail bytes and 1 torn-line byte per record,
    and each rewritten base once: at most 3nL + 65n. With floor 0 the base doubles between
    rewrites, so there are at most log2(n) + 2 of them."""
    monkeypatch.setattr(files, "_JOURNAL_FLOOR", floor)
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # durability is not what is counted
    counter = Counter(monkeypatch)
    n = 1000
    paths = [write(tmp_path, f"image-{i:06d}.png", b"x" * (i % 7)) for i in range(n)]
    for path in paths:
        record_output(path)
    longest = max(len(line(p.name, p.read_bytes())) for p in paths)
    assert counter.written <= 3 * n * longest
    assert counter.read <= 3 * n * longest + 65 * n
    if floor == 0:
        assert 2 <= counter.rewrites <= math.log2(n) + 2
    else:  # 1,000 lines of ~110 bytes stay under 64 KiB of lines but once
        assert counter.rewrites <= 1
    before = counter.read
    assert all(written_by_cvbench(p) for p in paths)  # n checks read the list's last line
    assert counter.read - before <= longest + 64
    files._forget_lists()  # a new process: the list is read once, whole
    before = counter.read
    assert all(written_by_cvbench(p) for p in paths)
    assert counter.read - before == (tmp_path / OUTPUTS_LIST).stat().st_size


def test_an_older_cvbench_list_is_read_appended_to_and_rewritten_as_plain_json(
    tmp_path, monkeypatch
):
    a, b, c = (write(tmp_path, n, n.encode() * 3) for n in ("a.json", "b.json", "c.json"))
    listing = tmp_path / OUTPUTS_LIST
    write_json_atomic(listing, {"a.json": entry(b"a.jsona.jsona.json"), "b.json": entry(b"?")})
    old = listing.read_bytes()  # an older cvbench's indented JSON
    assert written_by_cvbench(a) and not written_by_cvbench(b)  # b's entry: other content
    record_output(c)
    assert listing.read_bytes() == old + line("c.json", c.read_bytes())
    assert written_by_cvbench(a) and written_by_cvbench(c) and not written_by_cvbench(b)
    monkeypatch.setattr(files, "_JOURNAL_FLOOR", 0)
    record_output(b)  # the lines of c and b (2 x 99 bytes) within the base's 234 bytes
    assert listing.read_bytes().startswith(old) and written_by_cvbench(b)
    record_output(a)  # a's entry is in the base already: nothing appended
    assert listing.read_bytes().startswith(old) and listing.read_bytes().count(b"\n") == 12
    d = write(tmp_path, "d.json", b"d.jsond.jsond.json")
    record_output(d)  # 3 x 99 > 234: rewritten, one plain JSON object again
    assert json.loads(listing.read_bytes()) == {
        n: entry(n.encode() * 3) for n in ("a.json", "b.json", "c.json", "d.json")
    }
    assert listing.read_bytes().count(b"\n") == 1
    assert all(written_by_cvbench(p) for p in (a, b, c, d))


def test_a_torn_last_line_is_passed_over_and_the_next_record_starts_its_own(tmp_path):
    """A recorder killed mid-append leaves part of a line: the file it was recording was
    never renamed into place, so the old entry stands; the next record starts on a new
    line, and the torn one, complete at last, is passed over (not a record)."""
    a, b = write(tmp_path, "a.json", b"old a"), write(tmp_path, "b.json", b"b")
    record_output(a)
    listing = tmp_path / OUTPUTS_LIST
    torn = line("a.json", b"new a")[:20]
    with open(listing, "ab") as f:
        f.write(torn)
    files._forget_lists()
    assert written_by_cvbench(a)
    record_output(b)
    assert listing.read_bytes() == line("a.json", b"old a") + torn + b"\n" + line("b.json", b"b")
    files._forget_lists()
    assert written_by_cvbench(a) and written_by_cvbench(b)


def test_a_removal_line_and_a_restored_entry_are_replayed(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    with recording(target):
        write_json_atomic(target, [1])
    with (
        interrupted_replace(monkeypatch, target),
        pytest.raises(KeyboardInterrupt),
        recording(target),
    ):
        write_json_atomic(target, [2])
    lines = (tmp_path / OUTPUTS_LIST).read_bytes().splitlines(keepends=True)
    first = target.read_bytes()
    # the first record, the second's record before its rename, the first given back
    assert lines[0] == lines[2] == line("r.json", first) and len(lines) == 3
    files._forget_lists()
    assert written_by_cvbench(target)
    files._set_entry(target, None)
    assert not written_by_cvbench(target)


def test_a_rewrite_interrupted_before_its_rename_leaves_the_list_whole(tmp_path, monkeypatch):
    """The rewrite is one rename: stopped before it, the record fails as a whole (so does
    the write it was for) and the list, its temporary gone, claims what it did."""
    a, b = write(tmp_path, "a.json", b"a"), write(tmp_path, "b.json", b"b")
    record_output(a)
    listing = tmp_path / OUTPUTS_LIST
    before = listing.read_bytes()
    monkeypatch.setattr(files, "_JOURNAL_FLOOR", 0)
    with interrupted_replace(monkeypatch, listing), pytest.raises(KeyboardInterrupt):
        record_output(b)
    assert listing.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [OUTPUTS_LIST, "a.json", "b.json"]
    assert written_by_cvbench(a) and not written_by_cvbench(b)
    record_output(b)
    assert written_by_cvbench(a) and written_by_cvbench(b)


def test_a_damaged_base_claims_nothing_and_the_next_record_starts_a_new_list(tmp_path):
    a, b = write(tmp_path, "a.json", b"a"), write(tmp_path, "b.json", b"b")
    listing = tmp_path / OUTPUTS_LIST
    listing.write_bytes(b'{"a.json": {"size": 1,\n' + line("a.json", b"a"))
    assert not written_by_cvbench(a)  # lines after a damaged base claim nothing either
    record_output(b)
    assert (
        listing.read_bytes()
        == b'{"b.json":'
        + json.dumps(entry(b"b"), sort_keys=True, separators=(",", ":")).encode()
        + b"}\n"
    )
    assert written_by_cvbench(b) and not written_by_cvbench(a)


def test_a_list_edited_in_place_is_read_again_whole(tmp_path):
    """The same inode grown, but not by appends (its bytes before the replayed end
    changed): replayed from the start, not onward."""
    a, b = write(tmp_path, "a.json", b"a"), write(tmp_path, "b.json", b"b")
    record_output(a)
    assert written_by_cvbench(a)
    listing = tmp_path / OUTPUTS_LIST
    inode = listing.stat().st_ino
    with open(listing, "r+b") as f:  # the same file, rewritten longer
        f.write(line("b.json", b"b") + line("a.json", None))
    assert listing.stat().st_ino == inode
    assert written_by_cvbench(b) and not written_by_cvbench(a)


def test_a_list_over_its_limit_claims_nothing_and_the_limit_grows_with_the_folder(
    tmp_path, monkeypatch
):
    """Lines here are 98 bytes (`["0.json",{"sha256":"<64 hex>","size":1}]` and a
    newline): 3 of them, 294, pass a 200-byte floor. With 100 bytes per
    entry of the folder (3 files and the list: 4) the limit is 200 + 400 = 600: read; with
    10 bytes per entry, 240: a list over it claims nothing (a planted giant list is never
    read whole)."""
    monkeypatch.setattr(files, "_LIST_FLOOR", 200)
    monkeypatch.setattr(files, "_LIST_PER_FILE", 100)
    paths = [write(tmp_path, f"{i}.json", b"%d" % i) for i in range(3)]
    for path in paths:
        record_output(path)
    assert (tmp_path / OUTPUTS_LIST).stat().st_size == 294
    files._forget_lists()
    assert all(written_by_cvbench(p) for p in paths)
    files._forget_lists()
    monkeypatch.setattr(files, "_LIST_PER_FILE", 10)
    assert not any(written_by_cvbench(p) for p in paths)


def test_a_fifo_in_place_of_the_list_is_refused(tmp_path):
    (tmp_path / "a.json").write_text("a")
    os.mkfifo(tmp_path / OUTPUTS_LIST)
    with pytest.raises(BadFileError, match="FIFO|fifo|pipe"):
        record_output(tmp_path / "a.json")
    assert not written_by_cvbench(tmp_path / "a.json")


def test_threads_recording_into_one_folder_lose_no_entry(tmp_path, monkeypatch):
    """4 threads x 150 records, rewritten every few hundred bytes: each thread's `flock`
    is its own (one open per record), so rewrites and appends interleave under the lock."""
    monkeypatch.setattr(files, "_JOURNAL_FLOOR", 300)
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    paths = [[write(tmp_path, f"t{t}-{i}.json", b"%d" % i) for i in range(150)] for t in range(4)]
    errors = []

    def run(mine):
        try:
            for path in mine:
                record_output(path)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(mine,)) for mine in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    files._forget_lists()
    assert all(written_by_cvbench(p) for mine in paths for p in mine)


RECORDER = """
import os, sys
from pathlib import Path
import cvbench.utils.files as files
files._JOURNAL_FLOOR = 300
os.fsync = lambda fd: None
folder, tag = Path(sys.argv[1]), sys.argv[2]
(folder / f"ready-{tag}").touch()
while not (folder / "go").exists():  # both start at once
    pass
for i in range(200):
    path = folder / f"{tag}-{i}.json"
    path.write_text(str(i))
    files.record_output(path)
"""


def test_two_processes_recording_into_one_folder_lose_no_entry(tmp_path):
    """2 processes x 200 records, rewriting the list every few hundred bytes: a recorder
    that waited for the lock of a list another one rewrote locks the new list, so no
    append lands in a replaced file."""
    env = {**os.environ, "PYTHONPATH": str(Path(files.__file__).parents[2])}
    procs = [
        subprocess.Popen([sys.executable, "-c", RECORDER, str(tmp_path), tag], env=env)
        for tag in ("p", "q")
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{t}").exists() for t in "pq"):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    (tmp_path / "go").touch()
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    files._forget_lists()
    names = [f"{tag}-{i}.json" for tag in ("p", "q") for i in range(200)]
    assert all(written_by_cvbench(tmp_path / name) for name in names)


def test_a_name_of_undecodable_bytes_is_recorded_and_read_back(tmp_path):
    path = tmp_path / os.fsdecode(b"caf\xe9-\xff.json")  # not UTF-8: \udce9, \udcff
    path.write_text("x")
    record_output(path)
    files._forget_lists()
    assert written_by_cvbench(path)


def test_a_file_system_without_locks_still_records(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    record_output(write(tmp_path, "a.json", b"a"))
    assert written_by_cvbench(tmp_path / "a.json")


def test_a_list_replaced_at_every_lock_fails_the_record_after_its_retries(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_RELOCKS", 3)
    monkeypatch.setattr(files, "inode_at", lambda path: -1)  # never the file it locked
    with pytest.raises(BadFileError, match="replaced 3 times"):
        record_output(write(tmp_path, "a.json", b"a"))


def test_a_list_that_may_not_be_written_in_place_is_rewritten_whole(tmp_path, monkeypatch):
    """A read-only list (0o444, copied from a read-only place) in a folder cvbench may
    write: an older cvbench replaced it by a rename, and so does a record now (its mode
    kept), where an append would be refused."""
    a, b = write(tmp_path, "a.json", b"a"), write(tmp_path, "b.json", b"b")
    record_output(a)
    listing = tmp_path / OUTPUTS_LIST
    listing.chmod(0o444)
    real = files.open_output

    def read_only(path, mode="w", **kwargs):
        if Path(path) == listing and os.stat(path).st_mode & 0o200 == 0:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, mode, **kwargs)

    monkeypatch.setattr(files, "open_output", read_only)  # as for a user who is not root
    record_output(b)
    assert json.loads(listing.read_bytes()) == {"a.json": entry(b"a"), "b.json": entry(b"b")}
    assert listing.stat().st_mode & 0o777 == 0o444
    assert written_by_cvbench(a) and written_by_cvbench(b)


def test_a_folder_cvbench_may_not_write_fails_the_record_naming_the_list(tmp_path, monkeypatch):
    def denied(path, mode="w", **kwargs):
        raise PermissionError(13, "Permission denied", os.fspath(path))

    monkeypatch.setattr(files, "open_output", denied)
    with pytest.raises(PermissionError, match=OUTPUTS_LIST):
        record_output(write(tmp_path, "a.json", b"a"))


def test_a_name_with_a_newline_stays_one_line(tmp_path):
    path = write(tmp_path, "two\nlines.json", b"x")
    record_output(path)
    assert (tmp_path / OUTPUTS_LIST).read_bytes() == line("two\nlines.json", b"x")
    files._forget_lists()
    assert written_by_cvbench(path)


ANOTHER = """
import sys
from pathlib import Path
import cvbench.utils.files as files
files._JOURNAL_FLOOR = int(sys.argv[2])
files.record_output(Path(sys.argv[1]))
"""


def test_records_of_another_process_are_seen_by_a_process_that_read_the_list(tmp_path):
    """This process keeps the list it replayed; another process's appended line is
    replayed onward from it, and its rewrite (a new file) read whole."""
    env = {**os.environ, "PYTHONPATH": str(Path(files.__file__).parents[2])}
    a, b, c = (write(tmp_path, n, n.encode()) for n in ("a.json", "b.json", "c.json"))
    record_output(a)
    assert written_by_cvbench(a) and not written_by_cvbench(b)
    for path, floor in ((b, 1 << 16), (c, 0)):  # appended; then rewritten
        inode = (tmp_path / OUTPUTS_LIST).stat().st_ino
        subprocess.run([sys.executable, "-c", ANOTHER, str(path), str(floor)], env=env, check=True)
        assert ((tmp_path / OUTPUTS_LIST).stat().st_ino == inode) == (floor > 0)
        assert all(written_by_cvbench(p) for p in (a, b, c) if p.name <= path.name)


def test_recording_the_same_file_again_leaves_the_list_unchanged(tmp_path):
    # a rerun that writes the same bytes (build-coco's annotation copy, the demo's second
    # prepare) records the entry the list holds already: nothing is appended
    target = tmp_path / "a.json"
    with recording(target):
        write_json_atomic(target, [1])
    listing = (tmp_path / OUTPUTS_LIST).read_bytes()
    with recording(target):
        write_json_atomic(target, [1])
    assert (tmp_path / OUTPUTS_LIST).read_bytes() == listing and written_by_cvbench(target)
    with recording(target):
        write_json_atomic(target, [2])  # other bytes: one more line
    assert len((tmp_path / OUTPUTS_LIST).read_bytes()) > len(listing)
    assert written_by_cvbench(target)
