"""The record-reading skeleton every TFRecord reader shares: sharded files -> parsed examples.

A reader (`cvbench.data.read.imagenet`, `cvbench.data.read.coco`) supplies only a *parse function*
(serialized record -> dict of tensors) and its augmentation; this module does the rest, the
same way for each (after TF Model Garden's `InputReader(decoder_fn, parser_fn)`):

1. `list_split_files` (`cvbench.data.read.splits`, every reader's one listing) finds
   `<split>-NNNNN-of-NNNNN` files (or a given file-name pattern), refuses an incomplete set
   or a 0-byte shard, and says what was looked for where when there are none.
2. `scan_files` counts each file's records (`cvbench.data.tfrecord.scan_tfrecord`) before any
   reading, so a truncated file is reported at start-up, by name, not hours into a run.
3. Per rank: `train_examples` deals out whole files (by-file sharding) when there are at least
   as many files as ranks, else every rank reads all files and keeps every R-th record;
   `eval_examples` gives rank `r` of `R` a contiguous range of the records
   (`rank_segments`), across file boundaries, so every record is read by exactly one rank.
4. `read_records` streams the records of (file, skip, take) segments. A record the TensorFlow
   reader rejects mid-file (CRC mismatch) ends that file's reader; the records it did not
   deliver come out as a lost-records marker naming the file, which `drop_lost_markers`
   raises on or skips and counts (`cvbench.data.read.corrupt`). When corrupt records are
   skipped, the reading goes on after the damaged record (`read_past_damage`): each damaged
   record alone is lost and counted.
5. The parse function turns each record into an example; the skeleton adds `source` (the file)
   and `index` (the record's position in it), which name a damaged record in error messages.
   The readers (`RecordExamples`) leave the records unparsed here: `RecordExamples.parse`
   runs inside the pipeline's corrupt-record guard, with the decode, so a record that is no
   `tf.train.Example` is named or skipped as a damaged one (a map of its own before the
   guard stopped the run with TensorFlow's parse error).

`cvbench.data.read.pipeline` then takes the examples to batches (parse and decode guard,
padding, options).

Record elements (before parsing) are dicts: `record` (string), `source` (the file, string),
`index` (int64) and `lost` (int64: 0 for a record; for a marker, the number of records of that
segment that were not read).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import tensorflow as tf

from cvbench.data.read.corrupt import CorruptRecordCounter, apply_policy, no_autograph
from cvbench.data.read.pipeline import RankRead

# The rank rules live in `ranks` (no TensorFlow there, for grain); re-exported here.
from cvbench.data.read.ranks import eval_steps as eval_steps
from cvbench.data.read.ranks import eval_steps_of, rank_range
from cvbench.data.read.ranks import rank_seed as rank_seed

# The one listing of a split (no TensorFlow there, for grain and DALI); re-exported here.
from cvbench.data.read.splits import list_split_files as list_split_files
from cvbench.data.read.splits import split_glob as split_glob
from cvbench.data.tfrecord import scan_tfrecord
from cvbench.utils.errors import BadFileError

ParseFn = Callable[[tf.Tensor], dict]


@dataclass(frozen=True)
class Segment:
    """Records `[skip, skip + take)` of one file."""

    path: str
    skip: int
    take: int


def scan_files(
    files: list[str], *, skip_corrupt: bool, counter: CorruptRecordCounter | None
) -> list[int]:
    """Counts the complete records of each file; handles truncated files.

    Returns:
        The number of complete records of each file.

    Raises:
        BadFileError: a truncated file, when `skip_corrupt` is False (naming the file). With
            `skip_corrupt` its complete records are used and the cut-off record is counted.
    """
    counts = []
    for path in files:
        scan = scan_tfrecord(path)
        if scan.truncated:
            if not skip_corrupt:
                raise BadFileError(
                    f"{scan.describe()}; copy or build it again, or pass skip_corrupt=True to "
                    "read only its complete records"
                )
            if counter is not None:  # printed and counted once, though each epoch rescans
                counter.report_found_before_reading(scan.describe())
            else:
                print(f"cvbench: skipped corrupt input: {scan.describe()}", file=sys.stderr)
        counts.append(scan.num_records)
    return counts


def rank_segments(
    files: list[str], counts: list[int], num_shards: int, shard_index: int
) -> list[Segment]:
    """The records of rank `shard_index` of `num_shards`: a contiguous slice of all records.

    Records are numbered across `files` in order; rank r gets records
    `[r * N // R, (r + 1) * N // R)`, so the ranks' counts differ by at most one and every
    record belongs to exactly one rank (`ranks.rank_range`). Example: counts [3, 3], 2 ranks
    -> rank 0 reads records 0..2 of file 0, rank 1 records 0..2 of file 1.
    """
    lo, hi = rank_range(sum(counts), num_shards, shard_index)
    segments, start = [], 0
    for path, n in zip(files, counts, strict=True):
        a, b = max(lo, start), min(hi, start + n)
        if a < b:
            segments.append(Segment(path, a - start, b - a))
        start += n
    return segments


def _segment_records(path: tf.Tensor, skip: tf.Tensor, take: tf.Tensor) -> tf.data.Dataset:
    # `skip` first: TFRecordDataset skips by the length headers, without reading (or
    # failing on) a damaged record before `skip`, which ended the segment unread before.
    records = tf.data.TFRecordDataset(path).skip(skip).ignore_errors().take(take)
    tagged = records.map(no_autograph(lambda r: (r, tf.constant(False))))
    end = tf.data.Dataset.from_tensors((tf.constant(b""), tf.constant(True)))

    def step(count: tf.Tensor, x: tuple) -> tuple:
        record, is_end = x
        missing = take - count
        # Records: lost 0. The end element: the records not delivered, or -1 when none are
        # missing (it is then dropped below).
        lost = tf.where(is_end, tf.where(missing > 0, missing, -1), tf.constant(0, tf.int64))
        return count + 1, {"record": record, "source": path, "index": skip + count, "lost": lost}

    stream = tagged.concatenate(end).scan(tf.constant(0, tf.int64), no_autograph(step))
    return stream.filter(no_autograph(lambda e: e["lost"] >= 0))


#: Records of a segment handled together when reading past damaged records (a marker is a
#: segment's last element): the per-batch check costs little per record.
_READ_ON_BATCH = 16


def _read_on(path: bytes, start: int, stop: int) -> tuple[list[bytes], list[int], list[int]]:
    """Records `[start, stop)` of the file at `path`, read past damaged ones: (the records,
    their indexes, the indexes of those that failed their CRC). TensorFlow's reader stops
    for good at a damaged record; a new one skips to the next record by the length headers
    (without reading the damaged data)."""
    path = path.decode() if isinstance(path, bytes) else path
    records: list[bytes] = []
    indexes: list[int] = []
    damaged: list[int] = []
    while start < stop:
        read = tf.data.TFRecordDataset(path).skip(start).ignore_errors().take(stop - start)
        got = [bytes(r) for r in read.as_numpy_iterator()]
        records += got
        indexes += range(start, start + len(got))
        start += len(got)
        if start < stop:  # record `start` failed its CRC
            damaged.append(start)
            start += 1
    return records, indexes, damaged


def _read_past_damage(batch: dict) -> dict:
    """Up to `_READ_ON_BATCH` elements of one segment, the same, unless the last is a
    lost-records marker at record i (record i failed its CRC, the reader stopped): then it
    counts record i alone, followed by the segment's records after i (`_read_on`) and one
    marker for each further damaged record."""
    last = {k: v[-1] for k, v in batch.items()}

    def read_on() -> tuple:
        records, indexes, damaged = tf.py_function(
            lambda p, i, n: _read_on(p.numpy(), int(i) + 1, int(i) + int(n)),
            [last["source"], last["index"], last["lost"]],
            [tf.string, tf.int64, tf.int64],
        )
        records, indexes = tf.reshape(records, [-1]), tf.reshape(indexes, [-1])
        damaged = tf.reshape(damaged, [-1])
        one = tf.ones_like(damaged)
        return (
            tf.concat([batch["record"], records, tf.fill(tf.shape(damaged), "")], 0),
            tf.concat([batch["index"], indexes, damaged], 0),
            tf.concat([batch["lost"][:-1], [1], tf.zeros_like(indexes), one], 0),
        )

    def as_read() -> tuple:
        return batch["record"], batch["index"], batch["lost"]

    records, indexes, lost = tf.cond(last["lost"] > 0, read_on, as_read)
    source = tf.fill(tf.shape(indexes), last["source"])
    return {"record": records, "source": source, "index": indexes, "lost": lost}


def read_records(
    segments: list[Segment],
    *,
    cycle_length: int = 8,
    shuffle_files: bool = False,
    seed: int | None = None,
    repeat: bool = False,
    deterministic: bool | None = None,
    read_past_damage: bool = False,
) -> tf.data.Dataset:
    """Streams the records of `segments` (interleaved across files), with lost markers.

    Args:
        segments: what to read (may be empty: a rank with no records).
        cycle_length: files read at once.
        shuffle_files: shuffle the segment order (again each epoch).
        seed: the file-shuffle seed.
        repeat: repeat forever.
        deterministic: keep a fixed interleave order.
        read_past_damage: after a record whose data fails its CRC, read on from the next one
            (`_read_on`), so that each damaged record alone is a marker of 1 lost record;
            False: the file's reader stops there and the marker counts the rest of the
            segment. (It batches each segment's records by `_READ_ON_BATCH` to look at them:
            used when corrupt records are skipped.)

    Returns:
        A dataset of record dicts (see the module doc).
    """
    paths = [s.path for s in segments]
    skips = [s.skip for s in segments]
    takes = [s.take for s in segments]
    ds = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant(paths, tf.string),
            tf.constant(skips, tf.int64),
            tf.constant(takes, tf.int64),
        )
    )
    if shuffle_files:
        ds = ds.shuffle(len(segments), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()

    def segment(path: tf.Tensor, skip: tf.Tensor, take: tf.Tensor) -> tf.data.Dataset:
        stream = _segment_records(path, skip, take)
        if read_past_damage:
            stream = stream.batch(_READ_ON_BATCH).map(no_autograph(_read_past_damage))
            stream = stream.unbatch()
        return stream

    return ds.interleave(
        no_autograph(segment),
        cycle_length=max(1, min(cycle_length, len(segments))),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )


def drop_lost_markers(
    ds: tf.data.Dataset, *, skip_corrupt: bool, counter: CorruptRecordCounter | None
) -> tf.data.Dataset:
    """Raises on lost-records markers (naming the file), or counts and drops them."""

    def message(e: dict) -> tf.Tensor:
        return tf.strings.join(
            [
                "corrupted TFRecord data in ",
                e["source"],
                ": the reader stopped at record ",
                tf.strings.as_string(e["index"]),
                " (CRC mismatch); ",
                tf.strings.as_string(e["lost"]),
                " records were not read",
            ]
        )

    return apply_policy(
        ds,
        lambda e: tf.equal(e["lost"], 0),
        message,
        skip_corrupt=skip_corrupt,
        counter=counter,
        weight_fn=lambda e: e["lost"],
    )


def _parse(records: tf.data.Dataset, parse_fn: ParseFn | None) -> tf.data.Dataset:
    """The examples of `records`: `parse_fn`'s fields (None: the serialized `record`) with
    `source` and `index`."""

    if parse_fn is None:  # a cheap map, not worth a hand-over between threads
        return records.map(no_autograph(lambda e: {k: e[k] for k in ("record", "source", "index")}))

    def to_example(element: dict) -> dict:
        parsed = parse_fn(element["record"])
        return {**parsed, "source": element["source"], "index": element["index"]}

    return records.map(no_autograph(to_example), num_parallel_calls=tf.data.AUTOTUNE)


def train_examples(
    files: list[str],
    parse_fn: ParseFn | None,
    *,
    num_shards: int,
    shard_index: int,
    seed: int | None,
    repeat: bool,
    cycle_length: int,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    shuffle_buffer: int | None = None,
) -> tf.data.Dataset:
    """The training examples of one rank: its records, parsed, in file order (or shuffled).

    With at least as many files as ranks, rank `r` reads files `r, r + R, ...` in an order
    shuffled with `seed` (again each epoch); with fewer, every rank reads all files in a fixed
    interleave and keeps records `r, r + R, ...`.

    Args:
        files: the split's files (`list_split_files`).
        parse_fn: serialized record (string scalar) -> dict of tensors; None: not parsed
            here (the examples hold the serialized `record`; see `RecordExamples.parse`).
        num_shards: ranks splitting the data.
        shard_index: this rank.
        seed: the rank's seed (`rank_seed`): file order; None: nondeterministic (faster).
        repeat: repeat forever.
        cycle_length: files read at once.
        skip_corrupt: skip and count truncated files and corrupt records instead of raising.
        counter: counts them.
        shuffle_buffer: records in the shuffle buffer (seeded with `seed`, a new order each
            pass); None or 1: not shuffled here. See `_shuffle_and_repeat`.

    Returns:
        Example dicts: `parse_fn`'s keys (or `record`) plus `source` (string) and `index`
        (int64).

    Raises:
        ValueError: this rank's files hold no records; a truncated file when `skip_corrupt`
            is False.
    """
    by_file = len(files) >= num_shards
    mine = files[shard_index::num_shards] if by_file else files
    counts = scan_files(mine, skip_corrupt=skip_corrupt, counter=counter)
    if sum(counts) == 0:
        raise ValueError(f"no records in the files {mine[:3]}...")
    records = read_records(
        [Segment(p, 0, n) for p, n in zip(mine, counts, strict=True)],
        cycle_length=cycle_length,
        shuffle_files=by_file,
        seed=seed,
        deterministic=seed is not None or not by_file,
        read_past_damage=skip_corrupt,
    )
    records = drop_lost_markers(records, skip_corrupt=skip_corrupt, counter=counter)
    if not by_file:  # fewer files than ranks: split the records instead
        records = records.shard(num_shards, shard_index)
    mine_count = sum(counts) if by_file else -(-sum(counts) // num_shards)  # at most
    records = _shuffle_and_repeat(
        records, mine_count, seed=seed, repeat=repeat, shuffle_buffer=shuffle_buffer or 1
    )
    return _parse(records, parse_fn)


def _shuffle_and_repeat(
    records: tf.data.Dataset, count: int, *, seed: int | None, repeat: bool, shuffle_buffer: int
) -> tf.data.Dataset:
    """`records` (at most `count` of them) shuffled with a buffer of `shuffle_buffer` (1: not
    shuffled) with `seed` (a new order each pass) and repeated when `repeat`.

    When a pass fits in the buffer, each pass is shuffled before the repeat, with a buffer of
    that pass: the buffer never reads the same records again from many passes ahead (a
    buffer of 10 000 over 24 records would hold 416 passes, read at the start of every
    epoch), and each pass holds every record once. A larger set is shuffled after the
    repeat.
    """
    if shuffle_buffer > 1 and count <= shuffle_buffer:  # a pass fits: shuffle the pass itself
        records = records.shuffle(count, seed=seed, reshuffle_each_iteration=True)
        shuffle_buffer = 1
    if repeat:
        records = records.repeat()
    if shuffle_buffer > 1:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return records


def eval_examples(
    files: list[str],
    parse_fn: ParseFn | None,
    *,
    num_shards: int,
    shard_index: int,
    batch_size: int,
    cycle_length: int,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
) -> tuple[tf.data.Dataset, int]:
    """The evaluation examples of one rank (a contiguous range, in order) and the step count.

    Args:
        files, parse_fn, num_shards, shard_index, cycle_length, skip_corrupt, counter: as in
            `train_examples`.
        batch_size: examples per batch, for the step count.

    Returns:
        `(examples, steps)`: the rank's example dicts, one pass, deterministic; and the
        batches every rank must yield, `eval_steps(ceil(records / num_shards), batch_size)`
        (the largest rank's count), so all ranks run the same number of steps.

    Raises:
        ValueError: a truncated file when `skip_corrupt` is False.
    """
    counts = scan_files(files, skip_corrupt=skip_corrupt, counter=counter)
    steps = eval_steps_of(sum(counts), num_shards, batch_size)
    segments = rank_segments(files, counts, num_shards, shard_index)
    records = read_records(
        segments, cycle_length=cycle_length, deterministic=True, read_past_damage=skip_corrupt
    )
    records = drop_lost_markers(records, skip_corrupt=skip_corrupt, counter=counter)
    return _parse(records, parse_fn), steps


@dataclass(frozen=True)
class RecordExamples:
    """TFRecord files and a parse function as the skeleton's `ExampleSource`
    (`cvbench.data.read.pipeline.read_batches`): `train_examples` / `eval_examples` over
    `files` with the rank's shard, seed and corrupt-record policy. Its examples are the
    serialized records (`record`, `source`, `index`); `parse` parses one inside the
    pipeline's corrupt-record guard.

    Attributes:
        files: the split's files (`list_split_files`).
        parse_fn: serialized record (string scalar) -> dict of tensors.
        cycle_length: files read at once, at least 1.
        shuffles: training: shuffle the rank's records here, with `spec.shuffle_buffer`
            (before the repeat when a pass fits: `train_examples`); False: the batches are
            shuffled after the repeat (`read_batches`).

    Raises:
        ValueError: `cycle_length` below 1.
    """

    files: list[str]
    parse_fn: ParseFn
    cycle_length: int = 10
    shuffles: bool = True

    def __post_init__(self) -> None:
        if self.cycle_length < 1:
            raise ValueError(f"cycle_length must be >= 1, got {self.cycle_length}")

    def parse(self, example: dict) -> dict:
        """`parse_fn` of the example's `record`, with the example's other keys (`source`,
        `index`, a training `seed`)."""
        fields = self.parse_fn(example["record"])
        return {**fields, **{k: v for k, v in example.items() if k != "record"}}

    def _reading(self, rank: RankRead) -> dict:
        return {
            "num_shards": rank.num_shards,
            "shard_index": rank.shard_index,
            "cycle_length": self.cycle_length,
            "skip_corrupt": rank.skip_corrupt,
            "counter": rank.counter,
        }

    def train(self, rank: RankRead) -> tf.data.Dataset:
        """The rank's training examples (`train_examples`), unparsed."""
        return train_examples(
            self.files,
            None,
            seed=rank.seed,
            repeat=rank.spec.repeat,
            shuffle_buffer=rank.spec.shuffle_buffer if self.shuffles else None,
            **self._reading(rank),
        )

    def eval(self, rank: RankRead) -> tuple[tf.data.Dataset, int]:
        """The rank's evaluation examples, unparsed, and the step count (`eval_examples`)."""
        return eval_examples(
            self.files, None, batch_size=rank.spec.batch_size, **self._reading(rank)
        )
