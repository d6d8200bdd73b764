"""`ReadSpec`: what every reader is asked to read, frozen and checked once.

The readers (`imagenet_dataset`, `tfds_dataset`, `coco_dataset`, `imagenet_dali_pipeline`,
`imagenet_dali_dataset`) share one set of reading arguments: the split, the batch and image
size, this process's shard, the image dtype, the seed, the corrupt-record policy, shuffling
and repeating. They are one value here (as Model Garden's `DataConfig` is handed to its
`InputReader`), and each reader takes it as `spec=` beside its own options (its parser,
preprocessing and file options):

    spec = ReadSpec(split="train", batch_size=256, training=True, seed=0)
    imagenet_dataset(data_dir, spec=spec, preprocessing=recipe.preprocessing)

A reader also takes the fields as keywords (`imagenet_dataset(data_dir, "train",
batch_size=256, training=True)`): `read_spec` merges them into a spec. A field left None
takes the reader's default (`with_defaults`: image size 224 for ImageNet, 320 for COCO; a
shuffle buffer of 10 000 records for ImageNet, 2048 for COCO).

No TensorFlow here: the dtype is checked by the reader that makes it (a floating
`tf.DType` for tf.data; one of DALI's names for DALI).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from cvbench.data._distributed import check_shards
from cvbench.data.image_io import DEFAULT_MAX_PIXELS, check_max_pixels


def _positive_int(name: str, value: Any, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ReadSpec:
    """The reading arguments every reader shares (see the module docstring).

    Attributes:
        split: 'train', 'validation' (records `<split>-NNNNN-of-NNNNN`, or `coco_<split>.*`
            for COCO, or a tfds split name); None: the reader's positional `split`.
        batch_size: images per batch (per process), a positive int.
        training: the training recipe (random augmentation, shuffle, repeat, drop remainder)
            or the evaluation one (every record once, padded to whole batches).
        image_size: output height and width in pixels, a positive int; None: the reader's
            default.
        num_shards, shard_index: this process's share of the records (both or neither);
            None: the launcher's size and rank at read time (Horovod's, or before Horovod
            starts `horovodrun`'s / `mpirun`'s variables; 1 and 0 without a launcher).
        dtype: image dtype name ('float32', 'bfloat16', 'float16'), checked by the reader.
        seed: makes file order, shuffling and augmentation deterministic (per rank); None:
            nondeterministic (faster).
        skip_corrupt: skip and count corrupt records and undecodable images (printing each
            to stderr) instead of raising an error naming the file (tf.data readers).
        corrupt_counter: a `CorruptRecordCounter` counting the skipped records.
        shuffle_buffer: training shuffle buffer in records, a positive int; None: the
            reader's default.
        repeat: training only: repeat forever (True) or make one pass (tf.data readers).
        max_pixels: the most pixels (height x width, read from the header before decoding)
            of a record's image; a larger one is a corrupt record (named, or skipped with
            `skip_corrupt`): a 1 MB PNG may claim 20000 x 20000 pixels, gigabytes once
            decoded. The builders' bound, `DEFAULT_MAX_PIXELS` (64 megapixels); None: none
            (tf.data and grain readers; DALI's decoder has its own limits).

    Raises:
        ValueError: a field with a bad value, named with the value.
    """

    split: str | None = None
    batch_size: int
    training: bool
    image_size: int | None = None
    num_shards: int | None = None
    shard_index: int | None = None
    dtype: Any = "float32"
    seed: int | None = None
    skip_corrupt: bool = False
    corrupt_counter: Any = None
    shuffle_buffer: int | None = None
    repeat: bool = True
    max_pixels: int | None = DEFAULT_MAX_PIXELS

    def __post_init__(self) -> None:
        check_max_pixels(self.max_pixels)
        _positive_int("batch_size", self.batch_size)
        _positive_int("image_size", self.image_size, optional=True)
        _positive_int("shuffle_buffer", self.shuffle_buffer, optional=True)
        if self.num_shards is not None or self.shard_index is not None:
            check_shards(self.num_shards, self.shard_index)

    def with_defaults(self, **defaults: Any) -> ReadSpec:
        """This spec with each of `defaults` (field -> value) filled in where it is None."""
        missing = {k: v for k, v in defaults.items() if getattr(self, k) is None}
        return dataclasses.replace(self, **missing) if missing else self

    def require_split(self) -> str:
        """The split, which a reader needs: raises ValueError when none was given."""
        if self.split is None:
            raise ValueError("split must be given (positionally or as spec.split), got None")
        return self.split


#: The field names of `ReadSpec`, which a reader accepts as keywords too.
READ_FIELDS: frozenset[str] = frozenset(f.name for f in dataclasses.fields(ReadSpec))


def read_spec(
    spec: ReadSpec | None = None, /, *, split: str | None = None, **fields: Any
) -> ReadSpec:
    """`spec` with `fields` (ReadSpec field names) replaced, or a new `ReadSpec` of them.

    `split` None keeps the spec's split. A name that is not a field raises TypeError, as an
    unexpected keyword argument does.
    """
    unknown = sorted(set(fields) - READ_FIELDS)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {unknown} (not ReadSpec fields)")
    if split is not None:
        fields["split"] = split
    if spec is None:
        return ReadSpec(**fields)
    if not isinstance(spec, ReadSpec):
        raise ValueError(f"spec must be a ReadSpec or None, got {spec!r}")
    return dataclasses.replace(spec, **fields) if fields else spec
