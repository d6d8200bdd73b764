"""`map` on worker processes, in order: how the builders encode records on every core.

`parallel_map(fn, items, num_workers, chunksize)` is `map(fn, items)` run in this process, or
on `num_workers` processes started with `spawn` (they import `fn`'s module afresh, so it must
import without side effects and should not import TensorFlow). Results come back in item
order, a bounded window of chunks ahead of the consumer. Used by
`cvbench.data.builders.sharded_writer`.

Workers never outlive this process, even when it is killed with SIGKILL: on Linux each worker
asks for SIGKILL when its parent dies (`prctl(PR_SET_PDEATHSIG)`) and then checks that the
parent is still there (it may have died before the request); elsewhere, or if `prctl` fails,
a thread in each worker polls `os.getppid()` and exits the worker once the parent is gone.
multiprocessing's resource tracker (started by `spawn`) then sees its pipe close and exits
too. Linux ties the parent-death signal to the *thread* that started the worker: create and
use a `ParallelMap` from one thread that outlives it (as `write_sharded` does).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

#: Whether workers ask Linux for a parent-death signal (else: the polling thread alone).
_USE_PDEATHSIG = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
#: Seconds between the fallback thread's looks at the parent.
_PARENT_POLL_SECONDS = 0.5


def _set_parent_death_signal() -> bool:
    """Asks Linux to SIGKILL this process when its parent dies; False if that failed."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int, interval: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(interval)
    os._exit(1)  # the parent is gone: nobody reads our results


def _init_worker(parent_pid: int, use_pdeathsig: bool) -> None:
    """Worker initializer: end this worker when the process that started it ends."""
    if not (use_pdeathsig and _set_parent_death_signal()):
        thread = threading.Thread(
            target=_watch_parent,
            args=(parent_pid, _PARENT_POLL_SECONDS),
            name="cvbench-parent-watch",
            daemon=True,
        )
        thread.start()
    # The parent may have died before the signal was asked for (it is then not sent).
    if os.getppid() != parent_pid:
        os._exit(1)


def _map_chunk(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    return [fn(item) for item in items]


class ParallelMap:
    """`map(fn, items)` in order on worker processes, a bounded window of chunks ahead.

    The first window is submitted on construction, so the workers start while the caller
    still prepares (imports TensorFlow). `close()` stops the workers; they also end by
    themselves when this process dies (see the module docstring).
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        num_workers: int,
        chunksize: int,
    ) -> None:
        # spawn: workers start clean (no copy of this process's TensorFlow state or threads).
        # A ProcessPoolExecutor (unlike multiprocessing.Pool) fails instead of restarting
        # workers that die at start-up.
        context = multiprocessing.get_context("spawn")
        self._executor = ProcessPoolExecutor(
            num_workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(os.getpid(), _USE_PDEATHSIG),
        )
        self._fn = fn
        self._chunks = _chunks(items, chunksize)
        self._window = 4 * num_workers
        self._pending: collections.deque = collections.deque()
        self._ready: collections.deque = collections.deque()
        self._fill()

    def _fill(self) -> None:
        while len(self._pending) < self._window:
            chunk = next(self._chunks, None)
            if chunk is None:
                return
            self._pending.append(self._executor.submit(_map_chunk, self._fn, chunk))

    def __iter__(self) -> ParallelMap:
        return self

    def __next__(self) -> Any:
        if not self._ready:
            if not self._pending:
                raise StopIteration
            future = self._pending.popleft()
            try:
                self._fill()
                self._ready.extend(future.result())
            except BrokenProcessPool as e:
                raise RuntimeError(
                    "a worker process died. Worker processes are started with 'spawn' and "
                    "import the main script again: call the builder under "
                    '`if __name__ == "__main__":` in scripts, or use num_workers=1'
                ) from e
        return self._ready.popleft()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


def parallel_map(
    fn: Callable[[Any], Any], items: Iterable[Any], num_workers: int, chunksize: int
) -> Iterator[Any]:
    """`map(fn, items)`, in this process (`num_workers` <= 1) or as a `ParallelMap` on
    `num_workers` processes (close it when done)."""
    if num_workers <= 1:
        return map(fn, items)
    return ParallelMap(fn, items, num_workers, chunksize)


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def default_num_workers() -> int:
    """The number of CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
