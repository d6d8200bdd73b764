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
of times before a step has run.
"""

from __future__ import annotations

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


def apply_policy(
    ds: tf.data.Dataset,
    ok_fn: Callable[[Any], tf.Tensor],
    message_fn: Callable[[Any], tf.Tensor],
    *,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    weight_fn: Callable[[Any], tf.Tensor] | None = None,
) -> tf.data.Dataset:
    """Raises on, or drops and counts, the elements for which `ok_fn` is False.

    Args:
        ds: the dataset.
        ok_fn: element -> scalar bool, False for a corrupt element.
        message_fn: element -> scalar string saying what is corrupt and where.
        skip_corrupt: drop (True) or raise `InvalidArgumentError` (False).
        counter: counts the dropped records (skip mode); None to only print them.
        weight_fn: element -> int64 number of records the element stands for (a lost-records
            marker stands for several); default 1.
    """
    if not skip_corrupt:
        return ds.map(
            no_autograph(
                lambda *e: _fail_unless(
                    ok_fn(_one(e)), tf.strings.join([message_fn(_one(e)), SKIP_HINT]), _one(e)
                )
            )
        )

    first_report = counter.first_report if counter is not None else _Reported().first

    def count_and_report(*e: Any) -> Any:
        element = _one(e)
        bad = tf.logical_not(ok_fn(element))
        n = weight_fn(element) if weight_fn is not None else tf.constant(1, tf.int64)

        def report_once() -> tf.Tensor:
            # A repeating stream meets a damaged record again on every pass (and its
            # read-ahead many passes at once): only the first meeting is counted and printed.
            message = message_fn(element)
            first = tf.numpy_function(first_report, [message], tf.bool, stateful=True)

            def report() -> tf.Tensor:
                if counter is not None:
                    counter.variable.assign_add(n)
                tf.print("cvbench: skipped corrupt input:", message, output_stream=sys.stderr)
                return tf.constant(True)

            return tf.cond(tf.reshape(first, []), report, lambda: tf.constant(True))

        done = tf.cond(bad, report_once, lambda: tf.constant(False))
        with tf.control_dependencies([done]):
            return tf.nest.map_structure(tf.identity, element)

    return ds.map(no_autograph(count_and_report)).filter(no_autograph(lambda *e: ok_fn(_one(e))))


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
