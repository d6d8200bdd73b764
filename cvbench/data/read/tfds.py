"""TensorFlow Datasets sources (`imagenet2012` and other image classification sets) with the
same preprocessing and element structure as `cvbench.data.read.imagenet.imagenet_dataset`.

Images are read encoded (`tfds.decode.SkipDecoding`), so training uses the fused JPEG
decode-and-crop too. TFDS labels are already 0-based. Ranks get equal parts of the split
(`tfds.even_splits`); evaluation pads every rank to the same number of full batches, with
weights (see `cvbench.data.read.pipeline.classification_transform`).

Only the source differs from the TFRecord readers: `TfdsExamples` plugs into the reader
skeleton (`cvbench.data.read.pipeline.read_batches`), whose batching (parse and decode
guard, padding, options), per-rank seed and step count are the same for every reader.

ImageNet needs a manual download before TFDS can prepare it (see the TFDS `imagenet2012`
page); `download=True` runs the preparation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from cvbench.data.read.corrupt import no_autograph
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.model_inputs import ClassifierInputs, attach
from cvbench.data.read.pipeline import (
    EvalPreprocess,
    RankRead,
    TrainPreprocess,
    classification_recipe,
    read_batches,
)
from cvbench.data.read.ranks import eval_steps
from cvbench.data.read.spec import ReadSpec, read_spec


def _import_tfds() -> Any:
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise ValueError(
            "reading TFDS data needs tensorflow-datasets: pip install tensorflow-datasets"
        ) from None
    return tfds


def _load(tfds: Any, name: str, split: Any, **kwargs: Any) -> tf.data.Dataset:
    try:
        return tfds.load(
            name, split=split, decoders={"image": tfds.decode.SkipDecoding()}, **kwargs
        )
    except AssertionError as e:  # TFDS's way of saying the data is not prepared
        raise FileNotFoundError(f"TFDS dataset {name!r}: {e}") from None


def _examples(ds: tf.data.Dataset, source: str) -> tf.data.Dataset:
    has_name = "file_name" in ds.element_spec

    def to_example(index: tf.Tensor, ex: dict) -> dict:
        return {
            "encoded": ex["image"],
            "label": tf.cast(ex["label"], tf.int32),
            "boxes": tf.zeros([0, 4], tf.float32),
            "filename": ex["file_name"] if has_name else tf.constant(""),
            "source": tf.constant(source),
            "index": index,
        }

    return ds.enumerate().map(no_autograph(to_example), num_parallel_calls=tf.data.AUTOTUNE)


def _num_examples(tfds: Any, name: str, split: Any, data_dir: Any, ds: tf.data.Dataset) -> int:
    try:
        return int(tfds.builder(name, data_dir=data_dir).info.splits[split].num_examples)
    except (KeyError, ValueError):
        pass
    n = int(ds.cardinality())
    if n >= 0:
        return n
    return int(ds.reduce(tf.constant(0, tf.int64), lambda c, _: c + 1))


def tfds_dataset(
    name: str = "imagenet2012",
    split: str | None = None,
    *,
    spec: ReadSpec | None = None,
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    train_preprocess: TrainPreprocess | None = None,
    eval_preprocess: EvalPreprocess | None = None,
    preprocessing: ImagePreprocessing | None = None,
    **read: Any,
) -> tf.data.Dataset:
    """A training or evaluation pipeline over a TFDS image classification dataset.

    Args:
        name: the TFDS name, e.g. 'imagenet2012' (features 'image' and 'label').
        split: a TFDS split, e.g. 'train', 'validation', 'train[:10%]'; None: `spec.split`,
            else 'train'.
        spec: the reading arguments (`ReadSpec`, as `imagenet_dataset`'s: image size
            default 224, shuffle buffer default 10 000 examples; `skip_corrupt` skips and
            counts undecodable images).
        data_dir: the TFDS data directory (default: TFDS's).
        **read: `ReadSpec` fields replacing the spec's (or making it, without `spec`).
        download: let TFDS download and prepare the data if it is missing.
        train_preprocess: replaces `preprocessing.preprocess_for_train`.
        eval_preprocess: replaces `preprocessing.preprocess_for_eval`.
        preprocessing: the input recipe's knobs (`ImagePreprocessing`), as
            `imagenet_dataset`'s; None: the defaults. Not with the split's preprocess hook.

    Returns:
        Training: `(images, labels)` batches; evaluation: `(images, labels, weights)` batches,
        exactly as `cvbench.data.imagenet_dataset`, carrying their `ClassifierInputs` (the
        `label` feature's class names) as it does, unless a preprocess hook made them.

    Raises:
        ValueError: bad arguments (`preprocessing` with the split's preprocess hook too),
            tensorflow-datasets not installed.
        FileNotFoundError: the dataset is not prepared (and `download` is False).
    """
    spec = read_spec(spec, split=split, **read)
    spec = spec.with_defaults(split="train", image_size=224, shuffle_buffer=10_000)
    transform, own = classification_recipe(
        spec,
        train_preprocess=train_preprocess,
        eval_preprocess=eval_preprocess,
        preprocessing=preprocessing,
    )
    tfds = _import_tfds()
    data_dir = os.fspath(data_dir) if data_dir is not None else None
    inputs = None if own is not None else ClassifierInputs(
        spec.image_size, preprocessing or ImagePreprocessing(), _class_names(tfds, name, data_dir)
    )  # fmt: skip
    examples = TfdsExamples(tfds, name, spec.split, data_dir=data_dir, download=download)
    return attach(read_batches(examples, spec, transform), inputs)


@dataclass(frozen=True)
class TfdsExamples:
    """A TFDS split as the reader skeleton's `ExampleSource`
    (`cvbench.data.read.pipeline.read_batches`): rank `r` of `R` reads part `r` of
    `tfds.even_splits(split, R)`; training shuffles its files with the rank's seed (the
    examples are shuffled by the batches), evaluation pads every rank to the largest part's
    steps."""

    tfds: Any
    name: str
    split: str
    data_dir: str | None = None
    download: bool = False
    #: The examples are shuffled by `read_batches` (with `spec.shuffle_buffer`).
    shuffles: bool = False
    #: The examples are TFDS's parsed fields: nothing to parse inside the guard.
    parse = None

    def _parts(self, num_shards: int) -> list:
        return self.tfds.even_splits(self.split, n=num_shards) if num_shards > 1 else [self.split]

    def _load(self, part: Any, **kwargs: Any) -> tf.data.Dataset:
        return _load(
            self.tfds, self.name, part, data_dir=self.data_dir, download=self.download, **kwargs
        )

    def train(self, rank: RankRead) -> tf.data.Dataset:
        """The rank's part, its files shuffled with the rank's seed, repeated with
        `spec.repeat`."""
        read_config = self.tfds.ReadConfig(shuffle_seed=rank.seed)
        mine = self._parts(rank.num_shards)[rank.shard_index]
        ds = self._load(mine, shuffle_files=True, read_config=read_config)
        if rank.spec.repeat:
            ds = ds.repeat()
        return _examples(ds, f"{self.name}/{self.split}")

    def eval(self, rank: RankRead) -> tuple[tf.data.Dataset, int]:
        """The rank's part in order, and the steps of the largest part."""
        parts = self._parts(rank.num_shards)
        datasets = [self._load(part, shuffle_files=False) for part in parts]
        largest = max(
            _num_examples(self.tfds, self.name, p, self.data_dir, d)
            for p, d in zip(parts, datasets, strict=True)
        )
        steps = eval_steps(largest, rank.spec.batch_size)
        return _examples(datasets[rank.shard_index], f"{self.name}/{self.split}"), steps


def _class_names(tfds: Any, name: str, data_dir: Any) -> tuple[str, ...] | None:
    """The names of the dataset's `label` feature (a `ClassLabel`), or None."""
    try:
        label = tfds.builder(name, data_dir=data_dir).info.features["label"]
    except (KeyError, ValueError, TypeError):
        return None
    names = getattr(label, "names", None)
    return tuple(map(str, names)) if names else None
