"""What grain's read threads call, called from several threads at once.

With `read_threads` > 0 grain's `PrefetchDatasetIterator` runs `sampler[i]` and
`data_source[key]` on a thread pool (`grain-prefetch_*`), while the maps (`TrainMap`,
`EvalMap`, the batch function) run on the thread that iterates (instrumented for read
threads 0 and 2, worker processes 0 and 2: docs/data.md, "Threads"). Here: the shared
state of those callables (the sampler's epoch order, the source's descriptor cache, the
example slots a map may share with another iterator's thread) under a thread switch every
microsecond, and a restored iterator with read threads, many times over.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from grain_records import write_split

from cvbench.data.grain.dataset import _Slots, imagenet_grain_dataset
from cvbench.data.grain.records import TFRecordSource

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic


def _yielding_in(function: Callable) -> Callable:
    """A trace function (`sys.settrace`) under which a thread gives the others their turn
    (`time.sleep(0)` releases the GIL) before every bytecode of `function`: a race in it
    shows in every run, not one run in thirty. (Run it under `_switching_often`: a thread
    waiting for the GIL otherwise waits out the 5 ms switch interval at each turn.)"""
    code = function.__code__

    def yielding(frame, event, arg):
        time.sleep(0)
        return yielding

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None
        frame.f_trace_opcodes = True  # between the stores of one line too
        return yielding

    return tracer


@contextlib.contextmanager
def _switching_often():
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _at_once(work: Callable[[int], None], count: int, *, interleave: Callable) -> None:
    """`work(k)` on `count` threads released together by a barrier, switching threads at
    every line of `interleave` (`_yielding_in`)."""
    start = threading.Barrier(count)
    tracer = _yielding_in(interleave)

    def run(k: int) -> None:
        sys.settrace(tracer)
        try:
            start.wait()
            work(k)
        finally:
            sys.settrace(None)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    with _switching_often():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("threads")
    # 6 records in 2 shards (3, 3)
    return write_split(root, "train", [(12, 16), (16, 12), (10, 10)] * 2, num_shards=2)


def test_threads_opening_a_shard_at_once_keep_one_descriptor_per_shard(shards):
    # Regression: `TFRecordSource.__getitem__` looked its shard's descriptor up, opened one
    # when there was none and stored it; two threads doing so at once each opened one and
    # the second store dropped the first, a descriptor never closed (one per shard per
    # race: a long run's read threads could run out of them). Each source here is read by 4
    # threads at once from its first read; when all sources are collected every descriptor
    # they opened is closed again.
    expected = [TFRecordSource(shards)[i] for i in range(6)]
    before = _open_descriptors()
    for _ in range(10):
        source = TFRecordSource(shards)
        assert _wrong_reads(source, expected) == [] and len(source._fds) == 2
        # the source's own two descriptors, nothing else left open
        assert _open_descriptors() == before + 2
        del source
        gc.collect()
        assert _open_descriptors() == before


def _wrong_reads(source: TFRecordSource, expected: list[bytes]) -> list[int]:
    """The records 4 threads read at once, from both shards each, that are not `expected`."""
    wrong = []

    def read(k: int) -> None:
        for i in (k % 2 * 3, 5 - k % 2 * 3, 1, 4):
            if source[i] != expected[i]:
                wrong.append(i)

    _at_once(read, 4, interleave=TFRecordSource._descriptor)
    return wrong


def test_threads_taking_slots_at_once_never_share_an_array():
    # `_Slots.take` lends an array nobody else holds: the check (a reference count) and the
    # lending must be one step, or two threads see the same free array and both write into
    # it. The maps run on the iterating thread (one per process in grain's loader), but two
    # iterators of one dataset share their map's slots, and free-threaded Python's
    # `mp_prefetch` runs the map on threads. Each thread writes its number into the array
    # it took and reads it back after a thread switch (another thread's number there: the
    # array was lent twice; 4 threads x 100 takes, a clash every few takes without the lock).
    slots = _Slots((64,), np.float32, limit=3)
    clashes = []

    def work(k: int) -> None:
        for _ in range(100):
            array = slots.take()
            array[...] = k
            time.sleep(0)
            if not (array == k).all():
                clashes.append(k)
            del array

    _at_once(work, 4, interleave=_Slots.take)
    assert clashes == [] and len(slots.buffers) <= 3


def _train(root, **kwargs):
    return imagenet_grain_dataset(
        root, "train", training=True, batch_size=2, image_size=8, seed=3, repeat=True,
        num_shards=1, shard_index=0, **kwargs,
    )  # fmt: skip


def test_an_iterator_with_read_threads_restored_across_an_epoch_end_is_exact_every_time(
    shards,
):
    # 6 records, batch 2: 3 batches an epoch. Restored mid-epoch at batch 1, 2, 4 or 5, and
    # read 3 batches on, across the epoch's end (batch 3 or 6), each time on a fresh dataset
    # with 2 read threads (an empty epoch cache; the threads ask on both sides of the end)
    # switching every microsecond, 60 runs in all: every batch equals the uninterrupted
    # run's, read without threads. (With the sampler's order cached in two attributes, the
    # CI failure of stop 45, this test failed in 4 of 5 tries.)
    reference_data = _train(shards[0].parent)
    live = iter(reference_data)
    states, batches = [], []
    for _ in range(8):
        states.append(live.get_state())
        batches.append(next(live))
    with _switching_often():
        for run in range(60):
            start = (1, 2, 4, 5)[run % 4]
            resumed = iter(_train(shards[0].parent, read_threads=2))
            resumed.set_state(states[start])
            for step in range(start, start + 3):
                got = next(resumed)
                assert np.array_equal(got[0], batches[step][0]), (run, step)
                assert np.array_equal(got[1], batches[step][1]), (run, step)
