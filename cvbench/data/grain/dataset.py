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

Order and augmentation depend only on the seed (grain's `IndexSampler` and the per-record
generator of a `RandomMapTransform`), not on `num_workers`. `iter(dataset)` is a grain
`DataLoader` iterator: `get_state()` (bytes, small) saved at a step and `set_state(...)` on a
fresh iterator continue with exactly the batches that followed; `iterate_from(start)` makes
that state from a batch count alone (the position a Trainer checkpoint records), so a
mid-epoch resume reads none of the batches before it, with any `num_workers`.

The batches carry the pipeline's `ClassifierInputs` (`cvbench_inputs`: evaluation resize,
normalization, the class names of `dataset_info.json`), as `imagenet_dataset`'s do: a
`Trainer` fitted on them writes model files with the same inputs and names.

Corrupt input: a truncated file is refused when the dataset is made, and an undecodable
image, an unparseable record or a label outside `num_classes` raises `BadFileError` naming
the file and the record when it is read (no skip-and-count policy on this path yet).
"""

from __future__ import annotations

import dataclasses
import os
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
from cvbench.data.grain.records import TFRecordSource, parse_example, split_files
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.model_inputs import ClassifierInputs, attach, class_names_of
from cvbench.data.read.ranks import eval_steps_of, rank_range, rank_seed
from cvbench.data.read.spec import ReadSpec, read_spec
from cvbench.utils.errors import BadFileError

try:  # grain is optional (the `jax` extra): `import_grain` says how to install it
    import grain.python as _grain

    _Map, _RandomMap = _grain.MapTransform, _grain.RandomMapTransform
except ImportError:  # pragma: no cover - exercised only without grain
    _grain = None
    _Map = _RandomMap = object

DTYPES = ("float32", "bfloat16", "float16")


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

    def parse(self, item: tuple[int, bytes]) -> tuple[dict, str]:
        index, record = item
        path, position = self.source.locate(index)
        where = f"{path} record {position}"
        try:
            example = parse_example(record)
        except ValueError as e:
            raise BadFileError(f"{where}: not an ImageNet tf.train.Example: {e}") from None
        label = example["label"]
        if self.num_classes is not None and not 0 <= label < self.num_classes:
            raise BadFileError(
                f"{where} ({example['filename']}): label {label} (stored {label + 1}) is "
                f"outside the model's {self.num_classes} classes"
            )
        return example, where

    def decode(self, example: dict, where: str) -> np.ndarray:
        try:
            return decode_image(example["encoded"], preprocessing=self.preprocessing)
        except ValueError as e:
            raise BadFileError(f"{where} ({example['filename']}): {e}") from None

    def finish(self, image: np.ndarray) -> np.ndarray:
        return scale_input(
            image, preprocessing=self.preprocessing, dtype=self.dtype, overwrite=True
        )

    def padding(self) -> tuple:
        size = self.image_size
        zeros = as_dtype(np.zeros((size, size, 3), np.float32), self.dtype)
        return zeros, np.int32(0), np.float32(0.0)


class TrainMap(_RandomMap):
    """Training: parse, decode, random crop and flip from the record's generator, scale."""

    def __init__(self, transform: _Transform) -> None:
        self.transform = transform

    def random_map(self, item: tuple[int, bytes], rng: np.random.Generator) -> tuple:
        t = self.transform
        example, where = t.parse(item)
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
            raise BadFileError(f"{where} ({example['filename']}): {e}") from None
        flip = bool(rng.random() < 0.5)
        view = train_image(
            image, image_size=t.image_size, window=window, flip=flip, preprocessing=t.preprocessing
        )
        return t.finish(view), np.int32(example["label"])


class EvalMap(_Map):
    """Evaluation: parse, decode, the evaluation view, scale; padding rows weigh 0."""

    def __init__(self, transform: _Transform) -> None:
        self.transform = transform

    def map(self, item: tuple[int, bytes] | None) -> tuple:
        t = self.transform
        if item is None:
            return t.padding()
        example, where = t.parse(item)
        image = t.decode(example, where)
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
            'bfloat16', 'float16'), seed (None: a random one), repeat). `skip_corrupt`,
            `corrupt_counter` and `shuffle_buffer` are tf.data's (refused / unused here:
            grain shuffles the whole rank's records).
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
        BadFileError: a truncated file (named).
        ValueError: bad arguments (a dtype, a resize method this path lacks,
            `skip_corrupt=True`, workers < 0); a split without records; a training rank
            with fewer records than a batch.
        ImportError: grain is not installed (says how to install it).
    """
    spec = read_spec(spec, split=split, **read).with_defaults(image_size=224)
    split_name = spec.require_split()
    p = supported_preprocessing(preprocessing)
    _check_options(spec, num_workers=num_workers, read_threads=read_threads)
    num_shards, shard_index = resolve_shards(spec.num_shards, spec.shard_index)
    grain = import_grain()
    if num_workers:
        _absl_flags_ready()
    source = _split_source(data_dir, split_name, file_pattern, index_dir)
    lo, hi = rank_range(len(source), num_shards, shard_index)
    if not isinstance(scaled_decode, bool):
        raise ValueError(f"scaled_decode must be a bool, got {scaled_decode!r}")
    transform = _Transform(
        source, spec.image_size, p, spec.dtype, num_classes, spec.training, scaled_decode
    )
    data, sampler, mapping, steps = _plan(grain, source, spec, lo, hi, num_shards, shard_index)
    operations = [mapping(transform), grain.Batch(spec.batch_size, drop_remainder=spec.training)]
    loader = _loader(
        grain, data, sampler, operations,
        workers=(num_workers, worker_buffer_size), read_threads=read_threads,
        batch_size=spec.batch_size,
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
) -> TFRecordSource:
    """The split's records (`TFRecordSource`), refused when there are none."""
    files = split_files(data_dir, split, file_pattern=file_pattern)
    source = TFRecordSource(files, index_dir=index_dir)
    if len(source) == 0:
        raise ValueError(f"the {split} files in {data_dir} hold no records: {source!r}")
    return source


def _loader(
    grain: Any,
    data: _Window,
    sampler: Any,
    operations: list,
    *,
    workers: tuple[int, int],
    read_threads: int,
    batch_size: int,
) -> Any:
    """The grain `DataLoader` of `data` in `sampler`'s order through `operations`, with
    `workers` = (worker processes, batches each prepares ahead).

    Reading a record is one pread: by default (`read_threads` 0) it is done in the
    transforming thread; grain's default, 16 threads polling a 500-record buffer, costs a
    fifth of a core. With read threads, two batches of records are read ahead.
    """
    return grain.DataLoader(
        data_source=data,
        sampler=sampler,
        operations=operations,
        worker_count=workers[0],
        worker_buffer_size=workers[1],
        read_options=grain.ReadOptions(
            num_threads=read_threads, prefetch_buffer_size=2 * batch_size if read_threads else 0
        ),
    )


def _check_options(spec: ReadSpec, *, num_workers: Any, read_threads: Any) -> None:
    """Refuses what the grain path does not do (a dtype, `skip_corrupt`) and bad counts."""
    if spec.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES} for the grain path, got {spec.dtype!r}")
    if spec.skip_corrupt:
        raise ValueError("skip_corrupt=True is not supported by the grain input path yet")
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
) -> tuple[_Window, Any, type, int | None]:
    """`(records, sampler, map, steps)` of the rank's records `[lo, hi)`.

    Training: in an order shuffled each epoch from the rank's seed (`ranks.rank_seed`; a
    random seed without `spec.seed`), endless with `spec.repeat`; no step count.
    Evaluation: in order, then padding up to the steps of the largest rank
    (`ranks.eval_steps_of`), the same on every rank.

    Raises:
        ValueError: a training rank has fewer records than one batch.
    """
    if not spec.training:
        steps = eval_steps_of(len(source), num_shards, spec.batch_size)
        data = _Window(source, lo, hi, pad=steps * spec.batch_size - (hi - lo))
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
    sampler = grain.IndexSampler(
        num_records=len(data),
        shard_options=grain.NoSharding(),
        shuffle=True,
        num_epochs=None if spec.repeat else 1,
        seed=rank_seed(seed, shard_index) % 2**32,
    )
    return data, sampler, TrainMap, None


def count_records(
    data_dir: str | os.PathLike,
    split: str,
    *,
    file_pattern: str | None = None,
    index_dir: str | os.PathLike | None = None,
) -> int:
    """The records of `split` in `data_dir` (`num_examples` without TensorFlow: the DALI
    index files, else one header scan of each file).

    Raises:
        FileNotFoundError: no `data_dir`, or no files of the split.
        BadFileError: a truncated file (named).
    """
    files = split_files(data_dir, split, file_pattern=file_pattern)
    return len(TFRecordSource(files, index_dir=index_dir))
