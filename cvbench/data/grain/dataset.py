"""`imagenet_grain_dataset`: ImageNet-format TFRecords -> NumPy batches through grain, TF-free.

The batches have the element structure of `cvbench.data.read.imagenet.imagenet_dataset`:

* training: `(images, labels)`: images [batch, size, size, 3] of `spec.dtype`, labels [batch]
  int32; endless (`repeat=True`) or one pass, the last partial batch dropped. Rank `r` of `R`
  reads records `[r * N // R, (r + 1) * N // R)` of the split (numbered across its files in
  order), in an order shuffled each epoch from the rank's seed; every record is read by
  exactly one rank per epoch (the partition `reader.rank_segments` uses for evaluation).
* evaluation: `(images, labels, weights)`: weights [batch] float32, 1.0 for a record and 0.0
  for padding (zero image, label 0); exactly `steps = ceil(ceil(N / R) / batch_size)`
  batches on every rank, as tf.data's, so the weights summed over ranks count the records.

The record order and each record's augmentation depend only on the seed
(`EpochShuffleSampler` and the per-record generator of a `RandomMapTransform`), not on
`num_workers`; which training records share a batch does (grain deals records to its workers
in turn and each batches its own), while evaluation's batches are the same with any
`num_workers` (its items are whole batches). `iter(dataset)` is a grain
`DataLoader` iterator: `get_state()` (bytes, small) saved at a step and `set_state(...)` on a
fresh iterator continue with exactly the batches that followed; `iterate_from(start)` makes
that state from a batch count alone (the position a Trainer checkpoint records), so a
mid-epoch resume reads none of the batches before it, with any `num_workers`.

The batches carry the pipeline's `ClassifierInputs` (`cvbench_inputs`: evaluation resize,
normalization, the class names of `dataset_info.json`), as `imagenet_dataset`'s do: a
`Trainer` fitted on them writes model files with the same inputs and names.

Corrupt input (`records.CorruptPolicy`): a truncated file, an unparseable record or an
undecodable image raises `BadFileError` naming the file and the record, or, with
`skip_corrupt=True`, is printed and counted once (in `spec.corrupt_counter`, a
`records.SkippedRecords`, across worker processes) and:

* evaluation: becomes a padding row (weight 0), so every rank still yields `steps` batches
  and every good record is weighed exactly once;
* training: is replaced by a record drawn from the rank's records with the damaged record's
  own generator (`TrainMap`), tried again until one is good. The batch stays full and the
  epoch keeps its steps (the images/s and the epoch length the step count promises), and the
  replacement depends only on the sampler position and the data, so `state_at` stays exact
  and a resumed run makes the same replacements. (tf.data drops the record and the next one
  in its stream fills the batch: the same batch size, one record fewer per epoch; a weight-0
  row instead would cost a decode slot and change the training batch's structure.)

A label outside `num_classes` is an error whatever the policy (as on tf.data).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from cvbench.data._distributed import resolve_shards
from cvbench.data.grain.augment import (
    as_dtype,
    decode_and_random_crop,
    decode_image,
    eval_image,
    scale_input,
    supported_preprocessing,
    train_image,
)
from cvbench.data.grain.records import (
    CorruptPolicy,
    SkippedRecords,
    TFRecordSource,
    complete_records,
    parse_example,
)
from cvbench.data.image_io import DEFAULT_MAX_PIXELS, describe_shape, header_shape
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.model_inputs import ClassifierInputs, attach, class_names_of
from cvbench.data.read.ranks import eval_steps_of, rank_range, rank_seed
from cvbench.data.read.spec import ReadSpec, read_spec
from cvbench.data.read.splits import list_split_files
from cvbench.utils.errors import BadFileError

try:  # grain is optional (the `jax` extra): `import_grain` says how to install it
    import grain.python as _grain

    _Map, _RandomMap = _grain.MapTransform, _grain.RandomMapTransform
except ImportError:  # pragma: no cover - exercised only without grain
    _grain = None
    _Map = _RandomMap = object

DTYPES = ("float32", "bfloat16", "float16")
#: Training: records drawn in a row to replace a damaged one before giving up (a rank whose
#: records are mostly damaged is an error, not an endless search).
REPLACEMENT_TRIES = 64


def import_grain() -> Any:
    """`grain.python`, or an ImportError saying how to install it."""
    if _grain is None:
        raise ImportError(
            'the grain input path needs grain: pip install "cvbench[jax]" (or pip install grain)'
        )
    return _grain


def _absl_flags_ready() -> None:
    """grain's worker processes read absl flags, which a program not run by `absl.app` has
    not parsed (`UnparsedFlagAccessError`): mark them parsed (their defaults) when nobody
    parsed them."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


class _Window:
    """Records `[lo, hi)` of a source, then `pad` indices that read as None (padding)."""

    def __init__(self, source: TFRecordSource, lo: int, hi: int, pad: int = 0) -> None:
        self.source, self.lo, self.hi, self.pad = source, lo, hi, pad

    def __len__(self) -> int:
        return self.hi - self.lo + self.pad

    def __getitem__(self, index: int) -> tuple[int, bytes] | None:
        index = int(index)
        if index >= self.hi - self.lo:
            return None
        return self.lo + index, self.source[self.lo + index]

    def __repr__(self) -> str:
        return f"_Window({self.source!r}, records {self.lo}..{self.hi}, {self.pad} padding)"


class _BatchWindow:
    """A `_Window` dealt in whole batches: item `i` is its rows `[i * size, (i + 1) * size)`.
    grain's workers take items in turn and batch their own, so evaluation reads whole batches
    as items: the loader then yields exactly `len(self)` batches in order, whatever
    `num_workers` (rows dealt to W workers one by one would leave each a partial batch)."""

    def __init__(self, window: _Window, size: int) -> None:
        self.window, self.size = window, size

    def __len__(self) -> int:
        return len(self.window) // self.size

    def __getitem__(self, index: int) -> list[tuple[int, bytes] | None]:
        first = int(index) * self.size
        return [self.window[j] for j in range(first, first + self.size)]

    def __repr__(self) -> str:
        return f"_BatchWindow({self.window!r}, batches of {self.size})"


class EpochShuffleSampler:
    """A grain sampler: the records in an order shuffled each epoch, `RecordMetadata(index,
    record_key, rng)` for the global position `index` as grain's `IndexSampler` gives it.

    Epoch `e` reads the records in the order `np.random.default_rng([seed, e]).permutation(n)`,
    made once per epoch and process (one vectorised shuffle; `IndexSampler` runs a Feistel
    network through several Python layers for every record). Each record's generator is
    `IndexSampler`'s (Philox keyed `seed + index`), so a position's augmentation is the same
    as with it; only the order differs. Position `index` is a pure function of the seed, so
    `GrainBatches.state_at` and a restored iterator continue exactly.

    Example:
        >>> sampler = EpochShuffleSampler(num_records=5, seed=3, num_epochs=2)
        >>> len(sampler), sorted(sampler[i].record_key for i in range(5))
        (10, [0, 1, 2, 3, 4])
    """

    def __init__(self, *, num_records: int, seed: int, num_epochs: int | None) -> None:
        if num_records <= 0:
            raise ValueError(f"num_records must be > 0, got {num_records}")
        self.num_records, self.seed, self.num_epochs = num_records, seed, num_epochs
        self._orders: tuple[int, np.ndarray] = (-1, np.zeros(0, np.int64))

    def __len__(self) -> int:
        return sys.maxsize if self.num_epochs is None else self.num_epochs * self.num_records

    def __getitem__(self, index: int) -> Any:
        if index < 0 or index >= len(self):
            raise IndexError(f"position {index} is outside the sampler's {len(self)}")
        epoch, position = divmod(index, self.num_records)
        # grain's read threads ask for positions at once, on both sides of an epoch's end:
        # the cached (epoch, order) is read once and replaced whole, never half of it
        cached_epoch, order = self._orders
        if epoch != cached_epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_records)
            self._orders = (epoch, order)
        rng = np.random.Generator(np.random.Philox(key=self.seed + index))
        key = int(order[position])
        return _grain.RecordMetadata(index=index, record_key=key, rng=rng)

    def __getstate__(self) -> dict:  # workers make their epoch's order themselves
        return {**self.__dict__, "_orders": (-1, np.zeros(0, np.int64))}

    def __repr__(self) -> str:  # grain compares it with a saved state's
        return (
            f"EpochShuffleSampler(num_records={self.num_records}, seed={self.seed}, "
            f"num_epochs={self.num_epochs})"
        )


@dataclasses.dataclass(frozen=True)
class _Transform:
    """Serialized record -> one example: parse (the decoder), then the recipe (the parser)."""

    source: TFRecordSource
    image_size: int
    preprocessing: ImagePreprocessing
    dtype: str
    num_classes: int | None
    training: bool
    scaled_decode: bool = False
    #: What a damaged record does: raise (the default), or skip and count.
    policy: CorruptPolicy = CorruptPolicy()
    #: The rank's records `(lo, hi)` a damaged training record is replaced from; None: all.
    records: tuple[int, int] | None = None
    #: The most pixels a record's image may claim in its header (`ReadSpec.max_pixels`).
    max_pixels: int | None = DEFAULT_MAX_PIXELS

    def parse(self, item: tuple[int, bytes]) -> tuple[dict, str] | None:
        """`(example, where)` of a record; None for a damaged record the policy skips."""
        index, record = item
        path, position = self.source.locate(index)
        where = f"{path} record {position}"
        try:
            example = parse_example(record)
        except ValueError as e:
            return self.policy.corrupt(f"{where}: not an ImageNet tf.train.Example: {e}", key=where)
        label = example["label"]
        if self.num_classes is not None and not 0 <= label < self.num_classes:
            raise BadFileError(
                f"{where} ({example['filename']}): label {label} (stored {label + 1}) is "
                f"outside the model's {self.num_classes} classes"
            )
        shape = header_shape(example["encoded"])
        if self.max_pixels is not None and shape[0] * shape[1] * shape[2] > self.max_pixels:
            return self.policy.corrupt(
                f"{where} ({example['filename']}): image is {describe_shape(*shape)}, over "
                f"the limit of {self.max_pixels:,} (max_pixels, --max-pixels)",
                key=where,
            )
        return example, where

    def decode(self, example: dict, where: str) -> np.ndarray | None:
        """The decoded image; None for an undecodable one the policy skips."""
        try:
            return decode_image(example["encoded"], preprocessing=self.preprocessing)
        except ValueError as e:
            return self.policy.corrupt(f"{where} ({example['filename']}): {e}", key=where)

    def replacement(self, rng: np.random.Generator) -> tuple[int, bytes]:
        """A record of the rank's range drawn with `rng` (training's stand-in for a damaged
        record)."""
        lo, hi = self.records if self.records is not None else (0, len(self.source))
        index = lo + int(rng.integers(hi - lo))
        return index, self.source[index]

    def finish(self, image: np.ndarray) -> np.ndarray:
        return scale_input(
            image, preprocessing=self.preprocessing, dtype=self.dtype, overwrite=True
        )

    def padding(self) -> tuple:
        size = self.image_size
        zeros = as_dtype(np.zeros((size, size, 3), np.float32), self.dtype)
        return zeros, np.int32(0), np.float32(0.0)


class _Slots:
    """Reused arrays for training examples: an example lives from its map until grain
    stacks its batch, and a fresh 224 x 224 x 3 float32 array each time is, with glibc's
    dynamic mmap and trim thresholds, often new pages (a page fault per 4 KiB, costing
    about as much as scaling the image). An array is handed out again only when nothing
    but this pool refers to it (every NumPy view of it, however derived, holds its owner
    as `base`), so reuse is never visible; at most `limit` arrays are kept, more are plain
    new arrays. Threads may take at once (two iterators of one dataset share their map's
    slots; free-threaded Python's `mp_prefetch` maps on threads): finding a free array and
    lending it is one step under a lock, so no array is lent twice."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, limit: int) -> None:
        self.shape, self.dtype, self.limit = shape, dtype, limit
        self.buffers: list[np.ndarray] = []
        self.next = 0
        self._lock = threading.Lock()

    def take(self) -> np.ndarray:
        """An uninitialised array of `shape` and `dtype` that nobody else holds."""
        with self._lock:
            count = len(self.buffers)
            for k in range(count):
                i = (self.next + k) % count
                # the list's reference and getrefcount's argument: nobody else's
                if sys.getrefcount(self.buffers[i]) <= 2:
                    self.next = i + 1
                    return self.buffers[i][...]
            fresh = np.empty(self.shape, self.dtype)
            if count >= self.limit:
                return fresh
            self.buffers.append(fresh)
            self.next = count + 1
            return fresh[...]


class _Rows:
    """Lends the rows of reused batch arrays (`_Slots` of [batch, ...]) one by one, in order:
    consecutive examples land in consecutive rows of one array, so a batch of `batch`
    examples made in a row is that array already (`_BatchArrays` hands it on without
    stacking, a copy of every image). An array is lent again only when nobody holds it or
    any row of it. Thread-safe (one lock), as `_Slots`."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, limit: int) -> None:
        self.slots = _Slots(shape, dtype, limit)
        self._block: np.ndarray | None = None
        self._row = 0
        self._lock = threading.Lock()

    @property
    def buffers(self) -> list[np.ndarray]:
        """The arrays kept (`_Slots.buffers`)."""
        return self.slots.buffers

    def take(self) -> np.ndarray:
        """The next row: an uninitialised array of `shape[1:]` that nobody else holds."""
        with self._lock:
            if self._block is None:
                self._block, self._row = self.slots.take(), 0
            row = self._block[self._row]
            self._row += 1
            if self._row == len(self._block):
                self._block = None
            return row

    def restart(self) -> None:
        """The next row is row 0 of an array (after a batch that was not one array's rows:
        an abandoned iterator or a restored one left the rows out of step with batches)."""
        with self._lock:
            self._block = None


class TrainMap(_RandomMap):
    """Training: parse, decode, random crop and flip from the record's generator, scale. A
    damaged record the policy skips is replaced by records drawn with the same generator
    until one is good (module docstring). The examples are written, resized and scaled in
    place, into the rows of reused batch arrays (`_Rows`, `slots // batch` arrays of `batch`
    rows; `slots` 0: a new array each)."""

    def __init__(self, transform: _Transform, slots: int = 0, batch: int = 1) -> None:
        self.transform = transform
        self.slots = slots
        self.batch = batch
        self._outputs: _Rows | None = None

    def __getstate__(self) -> dict:  # a worker process makes its own arrays
        return {**self.__dict__, "_outputs": None}

    def random_map(self, item: tuple[int, bytes], rng: np.random.Generator) -> tuple:
        for _ in range(REPLACEMENT_TRIES):
            out = self._augment(item, rng)
            if out is not None:
                return out
            item = self.transform.replacement(rng)
        raise BadFileError(
            f"{REPLACEMENT_TRIES} damaged records in a row among {self.transform.source!r}'s "
            "records of this rank: the split is mostly damaged; check or rebuild it"
        )

    def _output(self) -> np.ndarray | None:
        """Where the next float32 example is resized and scaled in place (a `_Slots`
        array), or None for a new array (no slots, or another dtype: converted anyway)."""
        t = self.transform
        if not self.slots or t.dtype != "float32":
            return None
        outputs = self._outputs  # read once: a thread making the pool meanwhile is harmless
        if outputs is None:
            shape = (self.batch, t.image_size, t.image_size, 3)
            outputs = self._outputs = _Rows(shape, np.float32, max(1, self.slots // self.batch))
        return outputs.take()

    def _augment(self, item: tuple[int, bytes], rng: np.random.Generator) -> tuple | None:
        """The training example of one record; None when it is damaged and skipped."""
        t = self.transform
        parsed = t.parse(item)
        if parsed is None:
            return None
        example, where = parsed
        try:
            image, window = decode_and_random_crop(
                example["encoded"],
                image_size=t.image_size,
                rng=rng,
                boxes=example["boxes"],
                preprocessing=t.preprocessing,
                scaled=t.scaled_decode,
            )
        except ValueError as e:
            return t.policy.corrupt(f"{where} ({example['filename']}): {e}", key=where)
        flip = bool(rng.random() < 0.5)
        view = train_image(
            image, image_size=t.image_size, window=window, flip=flip,
            preprocessing=t.preprocessing, out=self._output(), scaled=True,
        )  # fmt: skip
        return as_dtype(view, t.dtype), np.int32(example["label"])


class _BatchArrays:
    """`grain.Batch`'s `batch_fn` for training batches made in this process (no worker
    processes, whose batches grain puts in shared memory itself). Examples that are the
    rows 0..n-1 of one `_Rows` array, in order (`TrainMap` lends them so), are that array:
    no copy. Other examples `(image, label)` are stacked into reused images arrays
    (`_Slots`; an array is lent again only when nothing refers to the batch any more, so a
    batch the caller keeps is never overwritten; a new 38 MB array per batch of 64 is new
    pages each time; up to `limit` arrays are kept), and `rows` (the map's `_Rows`, when
    given) restarts at a row 0, so the next batches are whole arrays again."""

    def __init__(self, limit: int = 2, rows: TrainMap | None = None) -> None:
        self.limit = limit
        self.rows = rows
        self._slots: _Slots | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_slots": None}

    def __call__(self, values: list[tuple]) -> tuple:
        labels = np.stack([v[1] for v in values])
        images = _rows_of_one_array([v[0] for v in values])
        if images is not None:
            return images, labels
        outputs = None if self.rows is None else self.rows._outputs
        if outputs is not None:
            outputs.restart()
        first = values[0][0]
        shape = (len(values), *first.shape)
        slots = self._slots
        if slots is None or slots.shape != shape or slots.dtype != first.dtype:
            slots = self._slots = _Slots(shape, first.dtype, self.limit)
        return np.stack([v[0] for v in values], out=slots.take()), labels


def _rows_of_one_array(images: list[np.ndarray]) -> np.ndarray | None:
    """A view of the array whose rows 0..n-1 `images` are, in order; None when they are
    not (a view of an array's row has the array as `base`)."""
    block = images[0].base
    if not isinstance(block, np.ndarray) or block.shape != (len(images), *images[0].shape):
        return None
    if block.dtype != images[0].dtype or not block.flags.c_contiguous:
        return None
    start, step = block.__array_interface__["data"][0], images[0].nbytes
    for i, image in enumerate(images):
        if image.base is not block or image.__array_interface__["data"][0] != start + i * step:
            return None
        if image.shape != images[0].shape or not image.flags.c_contiguous:
            return None
    return block[...]


class EvalMap(_Map):
    """Evaluation: parse, decode, the evaluation view, scale; padding rows, and damaged
    records the policy skips, weigh 0."""

    def __init__(self, transform: _Transform) -> None:
        self.transform = transform

    def map(self, items: list[tuple[int, bytes] | None]) -> tuple:
        """A batch `(images, labels, weights)` of the rows `items` (`_BatchWindow`'s)."""
        rows = [self.row(item) for item in items]
        return tuple(np.stack(part) for part in zip(*rows, strict=True))

    def row(self, item: tuple[int, bytes] | None) -> tuple:
        """`(image, label, weight)` of one record, or the padding row for None or a damaged
        record the policy skips."""
        t = self.transform
        parsed = None if item is None else t.parse(item)
        image = None if parsed is None else t.decode(*parsed)
        if image is None:
            return t.padding()
        example = parsed[0]
        view = eval_image(image, image_size=t.image_size, preprocessing=t.preprocessing)
        return t.finish(view), np.int32(example["label"]), np.float32(1.0)


class GrainBatches:
    """Re-iterable batches of a grain `DataLoader` (see the module docstring).

    Attributes:
        loader: the `grain.python.DataLoader`.
        steps: evaluation: the batches every rank yields; training: None.
        num_records: the records this rank reads per epoch.
        preprocessing: the recipe applied.
    """

    def __init__(
        self,
        loader: Any,
        *,
        steps: int | None,
        num_records: int,
        preprocessing: ImagePreprocessing,
        batch_size: int | None = None,
        num_workers: int = 0,
    ) -> None:
        self.loader = loader
        self.steps = steps
        self.num_records = num_records
        self.preprocessing = preprocessing
        self.batch_size = batch_size
        self.num_workers = num_workers
        self._template: bytes | None = None

    def __iter__(self) -> Iterator[tuple]:
        """A fresh iterator from the start; it has `get_state()` / `set_state(state)`."""
        return iter(self.loader)

    def state_at(self, start: int) -> bytes:
        """The grain iterator state after `start` batches from the start (what `get_state()`
        returns there), computed without reading them.

        grain's `DataLoader` deals records `w, w + W, w + 2W, ...` of the sampler's order to
        worker `w` of `W` (`W = max(num_workers, 1)`), each worker batches its own records,
        and the batches come round-robin from the workers: after `start` batches worker `w`
        has made `n_w = ceil((start - w) / W)` of them, its last record being the sampler's
        index `w + W * (n_w * batch - 1)`, and the next batch comes from worker `start % W`.
        """
        import json

        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"start must be an int >= 0, got {start!r}")
        if self.batch_size is None:
            raise ValueError("this GrainBatches does not know its batch size")
        if self._template is None:  # the version, sampler and source of this loader's states
            self._template = iter(self.loader).get_state()
        state = json.loads(self._template.decode())
        workers = max(self.num_workers, 1)
        made = [(start - w + workers - 1) // workers for w in range(workers)]
        state["last_seen_indices"] = {
            str(w): w + workers * (n * self.batch_size - 1) for w, n in enumerate(made)
        }
        state["last_worker_index"] = start % workers - 1 if self.num_workers else -1
        return json.dumps(state, indent=4).encode()

    def iterate_from(self, start: int) -> Iterator[tuple]:
        """An iterator yielding the batches from batch `start` on (0: `iter(self)`), set to
        `state_at(start)`: the skipped batches are neither read nor decoded."""
        iterator = iter(self.loader)
        if start:
            iterator.set_state(self.state_at(start))
        return iterator

    def __len__(self) -> int:
        if self.steps is None:
            raise TypeError("a training GrainBatches has no length (it may repeat forever)")
        return self.steps


def imagenet_grain_dataset(
    data_dir: str | os.PathLike,
    split: str | None = None,
    *,
    spec: ReadSpec | None = None,
    preprocessing: ImagePreprocessing | None = None,
    num_classes: int | None = None,
    num_workers: int = 0,
    worker_buffer_size: int = 2,
    read_threads: int = 0,
    scaled_decode: bool = False,
    file_pattern: str | None = None,
    index_dir: str | os.PathLike | None = None,
    **read: Any,
) -> GrainBatches:
    """ImageNet-format TFRecords -> NumPy batches through grain (module docstring), no TF.

    Args:
        data_dir: the folder of the TFRecord shards.
        split: 'train', 'validation', ...; None: `spec.split`.
        spec: the reading arguments (`ReadSpec`: batch size, image size (default 224),
            training, shards (default Horovod's, else 1 and 0), dtype ('float32',
            'bfloat16', 'float16'), seed (None: a random one), repeat, skip_corrupt: skip
            damaged records and undecodable images as the module docstring says, counting
            them once each in `corrupt_counter`, a `records.SkippedRecords` (None: a private
            one)). `shuffle_buffer` is tf.data's (unused: grain shuffles the whole rank's
            records).
        **read: `ReadSpec` fields replacing the spec's (or making it, without `spec`).
        preprocessing: the recipe (`ImagePreprocessing`; bilinear resizing only); None: the
            defaults (NVIDIA's ResNet-50 v1.5 pipeline).
        num_classes: the model's classes: a label outside [0, num_classes) raises
            `BadFileError` naming the record. None: not checked.
        num_workers: grain worker processes (0: in this process).
        worker_buffer_size: batches each worker prepares ahead.
        scaled_decode: training: decode a JPEG at 1/2 scale or less (libjpeg-turbo's
            DCT-domain scaling) when its crop is at least twice `image_size` on its shorter
            side (`augment.decode_and_random_crop`): the same crops and flips, fewer pixels
            to decode, smoother pixels than the recipe's full-size resize. Off by default.
        read_threads: threads reading records ahead of the transforms, per process (0: each
            record is read where it is transformed; raise it for slow network storage).
        file_pattern: a glob (relative to `data_dir`) instead of the split's shard names.
        index_dir: the DALI index files' folder (None: `data_dir/idx`); files without a
            fresh index are scanned.

    Returns:
        A `GrainBatches`.

    Raises:
        FileNotFoundError: no `data_dir`, or no files of the split.
        BadFileError: a truncated file (named), unless `skip_corrupt`.
        ValueError: bad arguments (a dtype, a resize method this path lacks, a
            `corrupt_counter` that is not a `SkippedRecords`, workers < 0); a split without
            records; a training rank with fewer records than a batch.
        ImportError: grain is not installed (says how to install it).
    """
    spec = read_spec(spec, split=split, **read).with_defaults(image_size=224)
    split_name = spec.require_split()
    p = supported_preprocessing(preprocessing)
    _check_options(
        spec, num_workers=num_workers, read_threads=read_threads, scaled_decode=scaled_decode
    )
    num_shards, shard_index = resolve_shards(spec.num_shards, spec.shard_index)
    grain = import_grain()
    if num_workers:
        _absl_flags_ready()
    policy = CorruptPolicy(skip=spec.skip_corrupt, skipped=spec.corrupt_counter)
    source = _split_source(data_dir, split_name, file_pattern, index_dir, policy)
    lo, hi = rank_range(len(source), num_shards, shard_index)
    transform = _Transform(
        source, spec.image_size, p, spec.dtype, num_classes, spec.training, scaled_decode,
        policy=policy, records=(lo, hi), max_pixels=spec.max_pixels,
    )  # fmt: skip
    data, sampler, mapping, steps = _plan(grain, source, spec, lo, hi, num_shards, shard_index)
    loader = _loader(
        grain, data, sampler, mapping(transform), spec=spec,
        workers=(num_workers, worker_buffer_size), read_threads=read_threads,
    )  # fmt: skip
    batches = GrainBatches(
        loader, steps=steps, num_records=hi - lo, preprocessing=p,
        batch_size=spec.batch_size, num_workers=num_workers,
    )  # fmt: skip
    return attach(batches, ClassifierInputs(spec.image_size, p, class_names_of(data_dir)))


def _split_source(
    data_dir: str | os.PathLike,
    split: str,
    file_pattern: str | None,
    index_dir: str | os.PathLike | None,
    policy: CorruptPolicy,
) -> TFRecordSource:
    """The split's records (`TFRecordSource`: a truncated file's tail as `policy` says),
    refused when there are none."""
    files = list_split_files(data_dir, split, file_pattern)
    source = TFRecordSource(files, index_dir=index_dir, policy=policy)
    if len(source) == 0:
        raise ValueError(f"the {split} files in {data_dir} hold no records: {source!r}")
    return source


def _loader(
    grain: Any,
    data: _Window | _BatchWindow,
    sampler: Any,
    mapping: Any,
    *,
    spec: ReadSpec,
    workers: tuple[int, int],
    read_threads: int,
) -> Any:
    """The grain `DataLoader` of `data` in `sampler`'s order through `mapping`, then, for
    training, batching (evaluation's `mapping` makes whole batches), with `workers` =
    (worker processes, batches each prepares ahead).

    Reading a record is one pread: by default (`read_threads` 0) it is done in the
    transforming thread; grain's default, 16 threads polling a 500-record buffer, costs a
    fifth of a core. With read threads, two batches of records are read ahead
    (evaluation: two items, each a whole batch).
    """
    operations = [mapping]
    if spec.training:
        batch_fn = None if workers[0] else _BatchArrays(rows=mapping)
        operations.append(grain.Batch(spec.batch_size, drop_remainder=True, batch_fn=batch_fn))
    items_per_batch = spec.batch_size if spec.training else 1
    return grain.DataLoader(
        data_source=data,
        sampler=sampler,
        shard_options=grain.NoSharding(),  # ranks are `rank_range`'s windows, not grain's
        operations=operations,
        worker_count=workers[0],
        worker_buffer_size=workers[1],
        read_options=grain.ReadOptions(
            num_threads=read_threads,
            prefetch_buffer_size=2 * items_per_batch if read_threads else 0,
        ),
    )


def _check_options(
    spec: ReadSpec, *, num_workers: Any, read_threads: Any, scaled_decode: Any
) -> None:
    """Refuses what the grain path does not do (a dtype, tf.data's corrupt-record counter),
    bad counts and a `scaled_decode` that is not a bool."""
    if not isinstance(scaled_decode, bool):
        raise ValueError(f"scaled_decode must be a bool, got {scaled_decode!r}")
    if spec.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES} for the grain path, got {spec.dtype!r}")
    counter = spec.corrupt_counter
    if counter is not None and not isinstance(counter, SkippedRecords):
        raise ValueError(
            "corrupt_counter must be a cvbench.data.grain.records.SkippedRecords on the grain "
            f"path, got {counter!r}"
        )
    for name, value in (("num_workers", num_workers), ("read_threads", read_threads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def _plan(
    grain: Any,
    source: TFRecordSource,
    spec: ReadSpec,
    lo: int,
    hi: int,
    num_shards: int,
    shard_index: int,
) -> tuple[_Window | _BatchWindow, Any, Any, int | None]:
    """`(records, sampler, map, steps)` of the rank's records `[lo, hi)`, `map(transform)`
    the map operation.

    Training: in an order shuffled each epoch from the rank's seed (`ranks.rank_seed`; a
    random seed without `spec.seed`), endless with `spec.repeat`; no step count; the
    examples in the rows of reused batch arrays (`TrainMap`'s slots: up to 4 batches kept,
    held by the caller or in flight).
    Evaluation: in order, then padding up to the steps of the largest rank
    (`ranks.eval_steps_of`), the same on every rank, in whole batches (`_BatchWindow`).

    Raises:
        ValueError: a training rank has fewer records than one batch.
    """
    if not spec.training:
        steps = eval_steps_of(len(source), num_shards, spec.batch_size)
        rows = _Window(source, lo, hi, pad=steps * spec.batch_size - (hi - lo))
        data = _BatchWindow(rows, spec.batch_size)
        sampler = grain.IndexSampler(
            num_records=len(data), shard_options=grain.NoSharding(), shuffle=False, num_epochs=1
        )
        return data, sampler, EvalMap, steps
    if hi - lo < spec.batch_size:
        raise ValueError(
            f"rank {shard_index} of {num_shards} has {hi - lo} records of {source!r}, "
            f"fewer than one batch of {spec.batch_size}"
        )
    seed = spec.seed if spec.seed is not None else int(np.random.SeedSequence().entropy % 2**63)
    data = _Window(source, lo, hi)
    sampler = EpochShuffleSampler(
        num_records=len(data),
        num_epochs=None if spec.repeat else 1,
        seed=rank_seed(seed, shard_index) % 2**32,
    )
    mapping = functools.partial(TrainMap, slots=4 * spec.batch_size, batch=spec.batch_size)
    return data, sampler, mapping, None


def count_records(
    data_dir: str | os.PathLike,
    split: str,
    *,
    file_pattern: str | None = None,
    index_dir: str | os.PathLike | None = None,
    skip_corrupt: bool = False,
) -> int:
    """The records of `split` in `data_dir` (`num_examples` without TensorFlow: the DALI
    index files, else one header scan of each file); with `skip_corrupt` a truncated
    file's complete records (its tail is reported when the records are read).

    Raises:
        FileNotFoundError: no `data_dir`, or no files of the split.
        BadFileError: a truncated file (named), unless `skip_corrupt`.
    """
    files = list_split_files(data_dir, split, file_pattern)
    if skip_corrupt:
        return sum(len(complete_records(p, index_dir=index_dir)[0]) for p in files)
    return len(TFRecordSource(files, index_dir=index_dir))
