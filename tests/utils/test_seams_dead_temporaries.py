"""A temporary of `atomic_path` left by a writer killed outright (SIGKILL: no `finally`
runs) is removed at the next atomic write into its folder; nothing else is.

Before: the temporary (`.<name>.<random>.tmp<suffix>`) stayed forever beside `eval --json`
reports, `predict --draw` drawings and results files.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from cvbench.utils import io as io_module
from cvbench.utils.io import HOST_TAG, atomic_path, remove_dead_temporaries, write_json_atomic

# The child writes half a file through atomic_open, says where, and waits to be killed.
_WRITER = textwrap.dedent(
    """
    import sys, time
    from cvbench.utils.io import atomic_open
    with atomic_open(sys.argv[1], "w") as f:
        f.write('{"half": ')
        f.flush()
        print(f.name, flush=True)
        time.sleep(600)
    """
)


def _killed_writer(target):
    """The temporary a writer of `target` leaves when SIGKILLed mid-write."""
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        tmp = child.stdout.readline().strip()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return tmp


@pytest.mark.parametrize("name", ["report.json", "cat_boxes.png", "train-00000-of-00002"])
def test_a_sigkilled_writers_temporary_is_removed_at_the_next_write(tmp_path, name):
    tmp = _killed_writer(tmp_path / name)
    assert os.path.dirname(tmp) == str(tmp_path) and os.path.exists(tmp)
    assert not (tmp_path / name).exists()  # nothing presented as complete
    suffix = os.path.splitext(name)[1]
    other_host = "0" * 8 if HOST_TAG != "0" * 8 else "1" * 8
    # Files that are not a dead cvbench temporary: a user's look-alikes, a live writer's.
    kept = {
        f".{name}.12345678-abcdefgh.tmp": "no cvbench- marker",
        f".{name}.cvbench-{HOST_TAG}-999999999-abcd1234.tmp.other": "another suffix",
        f".{name}.cvbench-{HOST_TAG}-{os.getpid()}-abcd1234.tmp{suffix}": "alive",
        # another machine's writer (a shared file system): its pid means nothing here
        f".{name}.cvbench-{other_host}-999999999-abcd1234.tmp{suffix}": "another host",
        "notes.txt": "a user's file",
    }
    for file, text in kept.items():
        (tmp_path / file).write_text(text)
    write_json_atomic(tmp_path / "other.json", {"a": 1})  # the next write into the folder
    assert not os.path.exists(tmp)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, "other.json"])
    for file, text in kept.items():
        assert (tmp_path / file).read_text() == text


def test_a_link_of_that_naming_is_never_followed_nor_removed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    link = tmp_path / f".out.json.cvbench-{HOST_TAG}-999999999-abcd1234.tmp.json"
    link.symlink_to(victim)
    assert remove_dead_temporaries(tmp_path) == []
    assert link.is_symlink() and (victim / "keep").read_text() == "x"


def test_a_dead_writers_temporary_folder_is_removed(tmp_path):
    # A writer may replace its temporary by a folder (model.save of a SavedModel).
    dead = tmp_path / f".model.cvbench-{HOST_TAG}-999999999-abcd1234.tmp"
    (dead / "variables").mkdir(parents=True)
    with atomic_path(tmp_path / "model") as tmp:
        tmp.write_text("m")
        assert not dead.exists()
    assert (tmp_path / "model").read_text() == "m"


def test_a_writer_in_another_pid_namespace_keeps_its_temporary(tmp_path):
    # Regression (review of 2026-12-05): a container with this machine's host name (Docker
    # --net=host, Kubernetes hostNetwork) has its own pids; its live writer's pid, absent
    # here, read as dead and its temporary was removed under it (the writer then failed
    # with FileNotFoundError, its report lost). The tag now holds the pid namespace.
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare as root to make a pid namespace")
    inside = [
        "unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _WRITER,
        str(tmp_path / "report.json"),
    ]  # fmt: skip
    child = subprocess.Popen(inside, stdout=subprocess.PIPE, text=True)
    try:
        tmp = child.stdout.readline().strip()
        assert tmp and HOST_TAG not in os.path.basename(tmp)  # the namespace's own tag
        write_json_atomic(tmp_path / "other.json", {"a": 1})  # this machine's next write
        assert os.path.exists(tmp)  # the live writer's temporary is left to it
    finally:
        child.kill()
        child.wait(timeout=30)


@pytest.mark.parametrize("pid", ["9999999999", "4294967296"])
def test_a_pid_this_system_cannot_have_leaves_the_file_and_writes_on(tmp_path, pid):
    # Regression (review of 2026-12-05): os.kill of a 10-digit pid raised OverflowError,
    # which is no OSError, and every atomic write into that folder failed.
    odd = tmp_path / f".a.json.cvbench-{HOST_TAG}-{pid}-abcd1234.tmp.json"
    odd.write_text("?")
    write_json_atomic(tmp_path / "a.json", {"a": 1})
    assert odd.read_text() == "?" and (tmp_path / "a.json").exists()


@pytest.mark.parametrize("pid", ["\u00b2", "\u0663\u0664"])  # superscript two; Arabic-Indic 34
def test_a_pid_of_digits_other_than_ascii_leaves_the_file_and_writes_on(tmp_path, pid):
    # Regression (review of 2026-12-05, 2nd): str.isdigit() accepts these, int() refuses
    # "\u00b2": a ValueError on every write into that folder (and every export beside such
    # a staging folder), and "\u0663\u0664" was read as pid 34.
    odd = tmp_path / f".a.json.cvbench-{HOST_TAG}-{pid}-abcd1234.tmp.json"
    odd.write_text("?")
    write_json_atomic(tmp_path / "a.json", {"a": 1})
    assert odd.read_text() == "?" and (tmp_path / "a.json").exists()
    assert io_module.writer_dead(HOST_TAG, pid) is False


def test_a_folder_is_swept_at_a_process_first_write_only(tmp_path, monkeypatch):
    # Regression (review of 2026-12-05): every write scanned its whole folder, so a command
    # writing N files into one folder (predict --draw) scanned N times N entries. The
    # writers killed before this process wrote there are dead for good: one sweep.
    first = tmp_path / f".x.json.cvbench-{HOST_TAG}-999999999-abcd1234.tmp.json"
    first.write_text("{")
    write_json_atomic(tmp_path / "a.json", {"a": 1})
    assert not first.exists()
    later = tmp_path / f".y.json.cvbench-{HOST_TAG}-999999998-abcd1234.tmp.json"
    later.write_text("{")
    calls = []
    monkeypatch.setattr(io_module, "remove_dead_temporaries", calls.append)
    for k in range(3):
        write_json_atomic(tmp_path / f"b{k}.json", {"b": k})
    assert calls == [] and later.exists()  # swept once already by this process
