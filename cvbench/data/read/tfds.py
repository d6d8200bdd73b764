"""TensorFlow Datasets sources (`imagenet2012` and other image classification sets) with the
same preprocessing and element structure as `cvbench.data.read.imagenet.imagenet_dataset`.

Images are read encoded (`tfds.decode.SkipDecoding`), so training uses the fused JPEG
decode-and-crop too. TFDS labels are already 0-based. Ranks get equal parts of the split
(`tfds.even_splits`); evaluation pads every rank to the same number of full batches, with
weights (see `cvbench.data.read.pipeline.eval_pipeline`).

Only the source differs from the TFRecord readers: the batching (decode guard, padding,
options) is `cvbench.data.read.pipeline`'s, the per-rank seed and step count
`cvbench.data.read.reader`'s.

ImageNet needs a manual download before TFDS can prepare it (see the TFDS `imagenet2012`
page); `download=True` runs the preparation.
"""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from cvbench.data._distributed import resolve_shards
from cvbench.data.read.corrupt import no_autograph
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.model_inputs import ClassifierInputs, attach
from cvbench.data.read.pipeline import (
    EvalPreprocess,
    TrainPreprocess,
    check_args,
    check_preprocessing,
    eval_pipeline,
    train_pipeline,
)
from cvbench.data.read.reader import eval_steps, rank_seed
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
    split, training, batch_size = spec.split, spec.training, spec.batch_size
    tf_dtype = check_args(spec.dtype)
    if training:
        check_preprocessing(preprocessing, train_preprocess, "train_preprocess")
    else:
        check_preprocessing(preprocessing, eval_preprocess, "eval_preprocess")
    tfds = _import_tfds()
    num_shards, shard_index = resolve_shards(spec.num_shards, spec.shard_index)
    parts = tfds.even_splits(split, n=num_shards) if num_shards > 1 else [split]
    mine = parts[shard_index]
    skip_corrupt = spec.skip_corrupt
    counter = spec.corrupt_counter if skip_corrupt else None
    data_dir = os.fspath(data_dir) if data_dir is not None else None
    seed_r = rank_seed(spec.seed, shard_index)
    common = {"data_dir": data_dir, "download": download}

    own = train_preprocess if training else eval_preprocess
    inputs = None if own is not None else ClassifierInputs(
        spec.image_size, preprocessing or ImagePreprocessing(), _class_names(tfds, name, data_dir)
    )  # fmt: skip
    if training:
        read_config = tfds.ReadConfig(shuffle_seed=seed_r)
        ds = _load(tfds, name, mine, shuffle_files=True, read_config=read_config, **common)
        if spec.repeat:
            ds = ds.repeat()
        dataset = train_pipeline(
            _examples(ds, f"{name}/{split}"),
            batch_size=batch_size,
            image_size=spec.image_size,
            dtype=tf_dtype,
            seed=seed_r,
            shuffle_buffer=spec.shuffle_buffer,
            skip_corrupt=skip_corrupt,
            counter=counter,
            preprocess=train_preprocess,
            preprocessing=preprocessing,
        )
        return attach(dataset, inputs)

    datasets = [_load(tfds, name, part, shuffle_files=False, **common) for part in parts]
    largest = max(
        _num_examples(tfds, name, p, data_dir, d) for p, d in zip(parts, datasets, strict=True)
    )
    dataset = eval_pipeline(
        _examples(datasets[shard_index], f"{name}/{split}"),
        batch_size=batch_size,
        image_size=spec.image_size,
        dtype=tf_dtype,
        steps=eval_steps(largest, batch_size),
        skip_corrupt=skip_corrupt,
        counter=counter,
        preprocess=eval_preprocess,
        preprocessing=preprocessing,
    )
    return attach(dataset, inputs)


def _class_names(tfds: Any, name: str, data_dir: Any) -> tuple[str, ...] | None:
    """The names of the dataset's `label` feature (a `ClassLabel`), or None."""
    try:
        label = tfds.builder(name, data_dir=data_dir).info.features["label"]
    except (KeyError, ValueError, TypeError):
        return None
    names = getattr(label, "names", None)
    return tuple(map(str, names)) if names else None
