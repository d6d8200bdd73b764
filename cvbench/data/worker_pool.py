"""`map` on worker processes, in order: how the builders encode records on every core.

`parallel_map(fn, items, num_workers, chunksize)` is `map(fn, items)` run in this process, or
on `num_workers` processes started with `spawn` (they import `fn`'s module afresh, so it must
import without side effects and should not import TensorFlow). Results come back in item
order, a bounded window of chunks ahead of the consumer. Used by `cvbench.data.sharded_writer`.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any


def _map_chunk(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    return [fn(item) for item in items]


class ParallelMap:
    """`map(fn, items)` in order on worker processes, a bounded window of chunks ahead.

    The first window is submitted on construction, so the workers start while the caller
    still prepares (imports TensorFlow). `close()` stops the workers.
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
        self._executor = ProcessPoolExecutor(num_workers, mp_context=context)
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
