"""What an input pipeline does with corrupt input: stop with the file's name, or skip and count.

Two kinds of damage reach a reader:

* a record whose bytes are damaged (a CRC mismatch inside a TFRecord file) or cut off (a
  truncated file): the TensorFlow reader stops reading that file. `cvbench.data.read.reader`
  turns the loss into a *lost-records marker* element naming the file;
* a record whose CRC is sound but whose content is not: no `tf.train.Example` (a writer's
  bug), damaged box lists, an image that does not decode (a truncated or garbage JPEG). The
  readers parse, decode and augment each record in one function; two ways to name the record
  that function fails on: `checked_map` (the fast path, used when corrupt input is an error)
  maps it over chunks of elements with a plain parallel `map`, drops failing calls with
  `ignore_errors` and raises, at the first position missing from the output, an error
  describing the element at that position; `guarded_map` (used with `skip_corrupt=True`) runs
  it per element inside its own small dataset, so a failure becomes an element with
  `ok = False` and a description. The description is made on the failure path only
  (`or_default` tells there what failed), so it costs nothing per sound record.

With `skip_corrupt=False` (the default) both become an `InvalidArgumentError` whose message
names the file (and record) and suggests `skip_corrupt=True`. With `skip_corrupt=True` the
damaged records are dropped, a line is printed to stderr for each, and a
`CorruptRecordCounter` counts them. Each damaged record is printed and counted *once*, told
by its message (which names the file and the record): a training stream repeats its files,
and its read-ahead (shuffle and prefetch buffers) can meet the same damaged record hundreds
of times before a step has run. A repeating stream whose every record is damaged would
filter forever without yielding (the process spinning, deaf to SIGTERM): past a bound on the
damaged elements in a row that a stream with a sound record never reaches (`apply_policy`),
it stops with `ALL_DAMAGED` naming a record, as grain's reader does after
`REPLACEMENT_TRIES` damaged records in a row.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import tensorflow as tf

SKIP_HINT = "; pass skip_corrupt=True to skip corrupt records"

# The dataset functions here and in the other pipeline modules use explicit tf.cond/tf.where,
# so AutoGraph has nothing to convert; wrapping them in `no_autograph` skips the conversion,
# which makes building a pipeline much faster.
no_autograph = tf.autograph.experimental.do_not_convert


class CorruptRecordCounter:
    """Counts records skipped as corrupt by pipelines built with `skip_corrupt=True`.

    Pass the same counter to several pipelines to add their counts. Each damaged record counts
    once, however often a repeating stream meets it (`first_report`). The count is exact once
    the pipeline has been iterated to its end; while it runs, records in flight (shuffle and
    prefetch buffers) are not counted yet.

    Example:
        >>> counter = CorruptRecordCounter()
        >>> counter.count
        0
        >>> counter.first_report(b"bad image a.JPEG (record 3 of f)")
        True
        >>> counter.first_report(b"bad image a.JPEG (record 3 of f)")  # met again
        False
    """

    def __init__(self) -> None:
        self._variable = tf.Variable(0, dtype=tf.int64, trainable=False, name="corrupt_records")
        self._found_before_reading = 0
        self._reported = _Reported()

    def first_report(self, message: bytes) -> bool:
        """Whether the damaged record `message` describes is met for the first time (and
        is to be printed and counted); False for every later meeting."""
        return self._reported.first(message)

    @property
    def variable(self) -> tf.Variable:
        """The int64 variable the pipelines increment."""
        return self._variable

    def add_found_before_reading(self, n: int) -> None:
        """Counts records known to be lost before reading (a truncated file's tail)."""
        self._found_before_reading += int(n)

    def report_found_before_reading(self, message: str, n: int = 1) -> bool:
        """Prints `message` (what is lost, naming the file) to stderr and counts `n` records
        lost before reading, the first time only: a pipeline built again for each epoch scans
        its files again. Returns whether this was the first time.

        Example:
            >>> counter = CorruptRecordCounter()
            >>> counter.report_found_before_reading("t-0 is truncated"), counter.count
            (True, 1)
            >>> counter.report_found_before_reading("t-0 is truncated"), counter.count
            (False, 1)
        """
        if not self.first_report(message.encode("utf-8")):
            return False
        print(f"cvbench: skipped corrupt input: {message}", file=sys.stderr)
        self.add_found_before_reading(n)
        return True

    @property
    def count(self) -> int:
        """Records skipped so far."""
        return int(self._variable.numpy()) + self._found_before_reading


class _Reported:
    """The messages of the damaged records reported so far (thread-safe: the pipeline's
    threads report concurrently)."""

    def __init__(self) -> None:
        self._messages: set[bytes] = set()
        self._lock = threading.Lock()

    def first(self, message: bytes) -> bool:
        message = bytes(message)
        with self._lock:
            if message in self._messages:
                return False
            self._messages.add(message)
            return True


def _fail_unless(ok: tf.Tensor, message: tf.Tensor, value: Any) -> Any:
    check = tf.debugging.Assert(ok, [message], name="corrupt_record")
    with tf.control_dependencies([check]):
        return tf.nest.map_structure(tf.identity, value)


#: `apply_policy`'s bound on a repeating stream with no sound record: a run of damaged
#: elements in a row stops the pipeline once it is longer than this ...
MIN_RUN = 64
#: ... and has met the run's first record again this many times (plus `reorder_laps`).
LAPS = 40
#: What the stop says (the CLI tells the error by it): skipping left nothing to read.
ALL_DAMAGED = "every record met was damaged"


def reorder_laps(deterministic: bool | None) -> int:
    """The passes a sound element can fall behind damaged ones in `guarded_map` (added to
    `LAPS`): 0 in input order (`deterministic`); else its parallel interleave hands out
    whichever element is ready, and a sound one (a slower decode than a failing one) is
    overtaken until every one of its current and prefetched slots (twice its width, the
    CPU count) holds a sound element, each from a pass of its own at worst.

    Example:
        >>> reorder_laps(True)
        0
        >>> import os
        >>> reorder_laps(False) == 2 * (os.cpu_count() or 1)
        True
    """
    return 0 if deterministic else 2 * (os.cpu_count() or 1)


def apply_policy(
    ds: tf.data.Dataset,
    ok_fn: Callable[[Any], tf.Tensor],
    message_fn: Callable[[Any], tf.Tensor],
    *,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    weight_fn: Callable[[Any], tf.Tensor] | None = None,
    reorder: int = 0,
) -> tf.data.Dataset:
    """Raises on, or drops and counts, the elements for which `ok_fn` is False.

    Skipping stops a stream that holds no sound element, instead of filtering it forever (a
    repeating training stream of damaged records only never yields, and its filter spins
    without end): a run of damaged elements in a row that is longer than `MIN_RUN` and has
    met its first record (told by its message) again `LAPS + reorder` times raises
    `InvalidArgumentError` `ALL_DAMAGED: N damaged records in a row, <first record's message> K
    times among them; ...`.
    On a stream with sound records it does not fire but by a chance too small to meet:
    where the stream is shuffled after it repeats (a set larger than the shuffle buffer)
    copies of one record from several passes can come out close together, so no count of
    passes is a proof; but each element out of the buffer is the run's first record about
    as often as it is any one sound record (once a pass each), so with k sound records a
    pass the first record comes back `LAPS` times before any sound one with probability
    about (1 / (1 + k))**LAPS: below 1e-12 with one sound record, 1e-24 with three (with
    `LAPS` 2, one run in 16 stopped a stream of 3 sound records among 300 shuffled after
    the repeat). Passes read one after the other (a set that fits the buffer) meet the first
    record at most once again. `reorder` covers the passes by which a parallel map before
    this may hand out damaged elements ahead of a sound one (`reorder_laps`). On a stream of
    damaged records only it stops after `LAPS + reorder + 1` passes (at least `MIN_RUN`
    elements). The run is state of each iterator (a `scan`): two iterators of one dataset
    do not share it. A sound element costs a comparison and a reset of that state.

    Args:
        ds: the dataset.
        ok_fn: element -> scalar bool, False for a corrupt element.
        message_fn: element -> scalar string saying what is corrupt and where.
        skip_corrupt: drop (True) or raise `InvalidArgumentError` (False).
        counter: counts the dropped records (skip mode); None to only print them.
        weight_fn: element -> int64 number of records the element stands for (a lost-records
            marker stands for several); default 1.
        reorder: passes a sound element may fall behind damaged ones upstream
            (`reorder_laps` of a `guarded_map` before this); 0: `ds` is in input order.
    """
    if not skip_corrupt:
        return ds.map(
            no_autograph(
                lambda *e: _fail_unless(
                    ok_fn(_one(e)), tf.strings.join([message_fn(_one(e)), SKIP_HINT]), _one(e)
                )
            )
        )

    if isinstance(reorder, bool) or not isinstance(reorder, int) or reorder < 0:
        raise ValueError(f"reorder must be a non-negative int, got {reorder!r}")
    first_report = counter.first_report if counter is not None else _Reported().first
    laps_bound = LAPS + int(reorder)

    def report_once(element: Any, message: tf.Tensor) -> tf.Tensor:
        # A repeating stream meets a damaged record again on every pass (and its read-ahead
        # many passes at once): only the first meeting is counted and printed.
        n = weight_fn(element) if weight_fn is not None else tf.constant(1, tf.int64)
        first = tf.numpy_function(first_report, [message], tf.bool, stateful=True)

        def report() -> tf.Tensor:
            if counter is not None:
                counter.variable.assign_add(n)
            tf.print("cvbench: skipped corrupt input:", message, output_stream=sys.stderr)
            return tf.constant(True)

        return tf.cond(tf.reshape(first, []), report, lambda: tf.constant(True))

    def step(state: tuple, *e: Any) -> tuple:
        element = _one(e)
        run, first, laps = state

        def damaged() -> tuple:
            message = message_fn(element)
            reported = report_once(element, message)
            starts = tf.equal(run, 0)
            first_now = tf.where(starts, message, first)
            again = tf.cast(
                tf.logical_and(tf.logical_not(starts), tf.equal(message, first)), tf.int64
            )
            laps_now = laps + again
            stuck = tf.logical_and(run + 1 > MIN_RUN, laps_now >= laps_bound)
            stop = tf.strings.join(
                [
                    f"{ALL_DAMAGED}: ",
                    tf.strings.as_string(run + 1),
                    " damaged records in a row, ",
                    first_now,
                    " ",
                    tf.strings.as_string(laps_now + 1),
                    " times among them; no sound record to read: check or rebuild the data",
                ]
            )
            check = tf.debugging.Assert(tf.logical_not(stuck), [stop], name="all_damaged")
            with tf.control_dependencies([reported, check]):
                return tf.identity(run + 1), tf.identity(first_now), tf.identity(laps_now)

        def sound() -> tuple:
            return tf.constant(0, tf.int64), tf.constant(""), tf.constant(0, tf.int64)

        return tf.cond(ok_fn(element), sound, damaged), element

    start = (tf.constant(0, tf.int64), tf.constant(""), tf.constant(0, tf.int64))
    return ds.scan(start, no_autograph(step)).filter(no_autograph(lambda *e: ok_fn(_one(e))))


def _one(args: tuple) -> Any:
    return args[0] if len(args) == 1 else args


def or_default(fn: Callable[[Any], Any], x: Any, default: Any) -> Any:
    """`fn(x)`, or `default` (of `fn`'s structure and dtypes) when `fn(x)` fails at run time.

    Inside a dataset function, where a failing op cannot be caught: `fn` runs in a
    one-element dataset whose failed element `ignore_errors` drops. It builds and runs a
    small dataset per call, so it is meant for a failure path (telling why a record was
    refused), not for every element.

    Example:
        >>> import tensorflow as tf
        >>> half = lambda s: tf.strings.to_number(s) / 2
        >>> float(or_default(half, tf.constant("3"), -1.0))
        1.5
        >>> float(or_default(half, tf.constant("three"), -1.0))
        -1.0
    """
    return (
        tf.data.Dataset.from_tensors(x)
        .map(no_autograph(fn))
        .ignore_errors()
        .concatenate(tf.data.Dataset.from_tensors(default))
        .take(1)
        .get_single_element()
    )


def _zeros_like_spec(spec: Any) -> Any:
    def zeros(s: tf.TensorSpec) -> tf.Tensor:
        shape = [d if d is not None else 0 for d in s.shape.as_list()]
        return tf.zeros(shape, s.dtype)

    return tf.nest.map_structure(zeros, spec)


def guarded_map(
    ds: tf.data.Dataset,
    fn: Callable[[Any], Any],
    *,
    output_spec: Any = None,
    num_parallel_calls: int | None = None,
    deterministic: bool | None = None,
) -> tf.data.Dataset:
    """Maps `fn` over `ds`, turning a failing call into an element marked not ok.

    Each element `e` becomes `(fn(e), True, e)`, or `(zeros, False, e)` when `fn(e)` raises an
    error at run time (an undecodable image). Follow with `apply_policy` to raise or skip.

    Each call runs in a one-element dataset of its own (a parallel interleave): a small cost
    per element beside a JPEG decode, paid only when corrupt input is skipped.

    Args:
        ds: elements with a single structure (a dict or a tensor; not an unpacked tuple).
        fn: element -> a nest of tensors.
        output_spec: the `tf.TensorSpec` nest `fn` returns (traced from `fn` if None).
        num_parallel_calls: parallel calls; default `tf.data.AUTOTUNE`.
        deterministic: keep the input order (None: the dataset option decides).

    Returns:
        A dataset of `(fn(e), ok, e)` triples.
    """
    if output_spec is None:
        output_spec = ds.take(1).map(no_autograph(fn)).element_spec
    zeros = _zeros_like_spec(output_spec)

    def guarded(element: Any) -> tf.data.Dataset:
        one = tf.data.Dataset.from_tensors(element)
        good = one.map(no_autograph(lambda e: (fn(e), tf.constant(True), e))).ignore_errors()
        bad = tf.data.Dataset.from_tensors((zeros, tf.constant(False), element))
        return good.concatenate(bad).take(1)

    parallel = num_parallel_calls if num_parallel_calls is not None else tf.data.AUTOTUNE
    return ds.interleave(
        no_autograph(guarded),
        cycle_length=tf.data.AUTOTUNE if parallel == tf.data.AUTOTUNE else parallel,
        block_length=1,
        num_parallel_calls=parallel,
        deterministic=deterministic,
    )


CHUNK_SIZE = 32


def _num_rows(chunk: Any) -> tf.Tensor:
    leaf = tf.nest.flatten(chunk, expand_composites=False)[0]
    if isinstance(leaf, tf.RaggedTensor):
        return leaf.nrows(out_type=tf.int64)
    return tf.shape(leaf, out_type=tf.int64)[0]


def checked_map(
    ds: tf.data.Dataset,
    fn: Callable[[Any], Any],
    *,
    message_fn: Callable[[Any], tf.Tensor],
    output_spec: Any = None,
    chunk_size: int = CHUNK_SIZE,
    deterministic: bool | None = None,
) -> tf.data.Dataset:
    """Maps `fn` over `ds`; a call that fails at run time raises an error that names its element.

    The fast path of `guarded_map` + `apply_policy(skip_corrupt=False)`, with the same
    elements in the same order and the same error. `ds` is cut into chunks of `chunk_size`
    elements (`ragged_batch`); each chunk becomes a small dataset, positions `j` of
    `range(n + 1)` mapped to `(j, fn(element j))` in parallel and in order, followed by
    `ignore_errors()`, so a failing call only leaves a gap in the positions (position `n`
    closes the chunk without calling `fn`, so a failure at its end leaves a gap too). Zipped
    with `range(n + 1)`, the first pair whose position differs from the one expected names
    the first failure: there `tf.debugging.Assert` fails on `message_fn` of the missing
    element + `SKIP_HINT` (an `InvalidArgumentError` when that element is read). Errors from
    `ds` itself (a label check, a lost-records marker) are not in the chunk's dataset and
    pass through unchanged.

    What is left per element: slicing it out of its chunk and one more function call (the
    check); `guarded_map` builds and runs a small dataset per element instead. Up to about
    four chunks of outputs are buffered (the interleave's two current chunks and the next
    two).

    Args:
        ds: elements with a single structure (a dict or a tensor; not an unpacked tuple).
        fn: element -> a nest of tensors of static shape.
        message_fn: element -> scalar string saying what failed and where.
        output_spec: the `tf.TensorSpec` nest `fn` returns (traced from `fn` if None).
        chunk_size: elements per chunk.
        deterministic: keep the input order across chunks (inside a chunk it is always
            kept); None: the dataset option decides.

    Returns:
        A dataset of `(fn(e), e)` pairs.

    Raises:
        ValueError: `chunk_size` is not a positive int.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if output_spec is None:
        output_spec = ds.take(1).map(no_autograph(fn)).element_spec
    zeros = _zeros_like_spec(output_spec)

    def one_chunk(chunk: Any) -> tf.data.Dataset:
        n = _num_rows(chunk)

        def element(j: tf.Tensor) -> Any:
            return tf.nest.map_structure(lambda x: x[j], chunk)

        def call(j: tf.Tensor) -> tuple:
            # Position n closes the chunk: it yields zeros instead of calling fn.
            e = element(tf.minimum(j, n - 1))
            out = tf.cond(j < n, lambda: fn(e), lambda: zeros)
            return j, out, e

        done = (
            tf.data.Dataset.range(n + 1)
            .map(no_autograph(call), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .ignore_errors()
        )

        def check(x: tuple, expected: tf.Tensor) -> tuple:
            j, out, e = x

            def fail() -> tf.Tensor:
                message = tf.strings.join([message_fn(element(expected)), SKIP_HINT])
                with tf.control_dependencies([tf.debugging.Assert(False, [message])]):
                    return tf.constant(False)

            ok = tf.cond(tf.equal(j, expected), lambda: tf.constant(True), fail)
            with tf.control_dependencies([ok]):
                return tf.nest.map_structure(tf.identity, (out, e))

        # A failed call shifts the positions that follow it (and position n, so a failure
        # at the end is seen too): the first pair (position, expected) that differs is the
        # first failure, and it comes before the n-th pair; the (n, n) pair of a chunk
        # without failures is left out by `take`.
        pairs = tf.data.Dataset.zip((done, tf.data.Dataset.range(n + 1)))
        return pairs.map(no_autograph(check)).take(n)

    return ds.ragged_batch(chunk_size).interleave(
        no_autograph(one_chunk),
        cycle_length=2,
        block_length=chunk_size,
        num_parallel_calls=2,
        deterministic=deterministic,
    )
