"""Worker processes: in-order results, and no worker (or resource tracker) outliving a
builder killed with SIGKILL."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from imagenet_testdata import make_raw

import cvbench
from cvbench.data.worker_pool import parallel_map

REPO_ROOT = Path(cvbench.__file__).resolve().parents[1]


def _square(n: int) -> int:
    return n * n


def test_parallel_map_keeps_item_order():
    results = parallel_map(_square, range(10), num_workers=2, chunksize=3)
    try:
        assert list(results) == [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
    finally:
        results.close()


def test_a_worker_whose_parent_is_already_gone_exits_at_once():
    # The race the initializer closes: the parent died before the death signal was asked
    # for. The worker sees another parent pid and exits (status 1) without running a task.
    code = (
        "import os; from cvbench.data import worker_pool; "
        "worker_pool._init_worker(os.getppid() + 100000, True); print('survived')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (1, "")


# ---------------------------------------------------------------------------------------------
# Finding processes through /proc (no psutil).


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of `pid`, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[1]), int(fields[19])


def _descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (start time, command line) of every living descendant of `root`."""
    children: dict[int, list[int]] = {}
    info = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            children.setdefault(st[1], []).append(int(entry))
            info[int(entry)] = st
    out, todo = {}, [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            out[pid] = (info[pid][2], cmdline)
            todo.append(pid)
    return out


def _alive(pid: int, start_time: int) -> bool:
    st = _stat(pid)
    # A zombie has exited (it holds no memory); a new start time is another process.
    return st is not None and st[0] != "Z" and st[2] == start_time


def _wait_for_reader(fifo: Path, proc: subprocess.Popen, timeout: float) -> int:
    """Opens `fifo` for writing once a worker has opened it for reading; returns the fd."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        if proc.poll() is not None:
            pytest.fail(f"the builder exited ({proc.returncode}) before reading the FIFO")
        time.sleep(0.05)
    pytest.fail(f"no worker opened {fifo} within {timeout} s")


# The build, as a script file: multiprocessing's spawn workers import a main *file* again
# (as `__mp_main__`), so its top level runs in every worker too. There it makes the worker
# that reads `zz_blocking.JPEG` block on a FIFO until the test writes to it: the build is then
# certainly mid-way (workers started and initialized) when it is killed. (The image itself
# cannot be the FIFO: the builders read only regular files, a FIFO is skipped at once.)
_BUILD = """
import os, sys
from cvbench.data.builders import imagenet_builder

_read = imagenet_builder.read_image_file


def _blocking_read(path, **kwargs):
    if str(path).endswith("zz_blocking.JPEG"):
        with open(os.environ["CVBENCH_TEST_FIFO"], "rb") as fifo:
            fifo.read(1)
    return _read(path, **kwargs)


imagenet_builder.read_image_file = _blocking_read

if __name__ == "__main__":
    from cvbench.data import worker_pool
    from cvbench.cli import main

    if sys.argv[1] == "polling":  # the portable path: a thread polling os.getppid()
        worker_pool._USE_PDEATHSIG = False
    sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mechanism", ["pdeathsig", "polling thread"])
def test_workers_and_resource_tracker_die_with_a_killed_builder(tmp_path, mechanism):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    folder = raw / "train" / "n00000001"
    shutil.copyfile(sorted(folder.iterdir())[0], folder / "zz_blocking.JPEG")
    fifo = tmp_path / "block.fifo"
    os.mkfifo(fifo)
    script = tmp_path / "build.py"
    script.write_text(_BUILD)
    command = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(tmp_path / "out")]
    command += ["--train-shards", "2", "--val-shards", "1", "--workers", "2", "--no-progress"]
    kind = "pdeathsig" if mechanism == "pdeathsig" else "polling"
    argv = [sys.executable, str(script), kind, *command]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KERAS_BACKEND": "tensorflow"}
    env["CVBENCH_TEST_FIFO"] = str(fifo)
    with open(tmp_path / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
    fd, family = None, {}
    try:
        fd = _wait_for_reader(fifo, proc, timeout=180)
        family = _descendants(proc.pid)
        workers = [p for p, (_, cmd) in family.items() if "--multiprocessing-fork" in cmd]
        trackers = [p for p, (_, cmd) in family.items() if "resource_tracker" in cmd]
        # 2 spawn workers (--workers 2) and multiprocessing's resource tracker, nothing else.
        assert (len(workers), len(trackers), len(family)) == (2, 1, 3), family
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            _alive(pid, start) for pid, (start, _) in family.items()
        ):
            time.sleep(0.05)
        left = {pid: cmd for pid, (start, cmd) in family.items() if _alive(pid, start)}
        assert left == {}, f"still running 10 s after the builder was killed: {left}"
    finally:
        if fd is not None:
            os.close(fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid, (start, _) in family.items():  # never leave strays behind
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
