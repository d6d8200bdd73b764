"""ImageNet TFRecords -> `tf.data` pipelines (the NVIDIA ResNet-50 v1.5 input recipe).

Reads the standard sharded files (`train-00000-of-01024`, `validation-00000-of-00128`, as
`cvbench build-imagenet` and the TensorFlow ImageNet builder write them); labels come out
0-based (the stored label minus 1).

Element structure:

* training: `(images, labels)`: images [batch, size, size, 3] `dtype`, labels [batch] int32;
  endless (`repeat=True`), the last partial batch dropped;
* evaluation: `(images, labels, weights)`: weights [batch] float32, 1.0 for a real image and
  0.0 for padding. Every validation record appears exactly once across all ranks; the stream
  is padded to `steps` full batches, the same number on every rank (the dataset's
  cardinality). Count top-1/top-5 with the weights: the sum of the weights over all ranks is
  the number of validation records.

Sharding across processes: `num_shards` / `shard_index`, by default the job's size and rank
(Horovod's, or its launcher's before Horovod starts: `cvbench.data._distributed`). Training
shards files (records when there are fewer files than ranks); evaluation gives each rank a
contiguous range of records.

This module holds only what is ImageNet's: the record parser
(`cvbench.data.tfrecord.parse_imagenet_example`) and the recipe
(`cvbench.data.read.pipeline.classification_transform`), plugged into the reader skeleton
(`cvbench.data.read.pipeline.read_batches`): reading (files, scan, rank split, corrupt
records) is `cvbench.data.read.reader.RecordExamples`; batching (parse and decode guard,
padding, options) `cvbench.data.read.pipeline`.
"""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.model_inputs import ClassifierInputs, attach, class_names_of
from cvbench.data.read.pipeline import (
    EvalPreprocess,
    TrainPreprocess,
    classification_recipe,
    label_check,
    read_batches,
)
from cvbench.data.read.reader import RecordExamples, list_split_files, scan_files
from cvbench.data.read.spec import ReadSpec, read_spec
from cvbench.data.tfrecord import parse_imagenet_example, scan_tfrecord


def num_examples(
    data_dir: str | os.PathLike,
    split: str,
    *,
    file_pattern: str | None = None,
    skip_corrupt: bool = True,
) -> int:
    """The number of complete records of a split (reads only the record headers).

    Raises:
        BadFileError: with `skip_corrupt=False`, a truncated or damaged file, naming it (the
            reader would refuse it too; counting first must not turn it into "too few
            records").
    """
    files = list_split_files(data_dir, split, file_pattern)
    if not skip_corrupt:
        return sum(scan_files(files, skip_corrupt=False, counter=None))
    return sum(scan_tfrecord(p).num_records for p in files)


def imagenet_dataset(
    data_dir: str | os.PathLike,
    split: str | None = None,
    *,
    spec: ReadSpec | None = None,
    cycle_length: int = 10,
    file_pattern: str | None = None,
    train_preprocess: TrainPreprocess | None = None,
    eval_preprocess: EvalPreprocess | None = None,
    num_classes: int | None = None,
    preprocessing: ImagePreprocessing | None = None,
    **read: Any,
) -> tf.data.Dataset:
    """A training or evaluation pipeline over ImageNet-format TFRecords.

    Args:
        data_dir: directory of the TFRecord shards.
        split: 'train', 'validation' (any split name whose files are `<split>-NNNNN-of-NNNNN`);
            None: `spec.split`.
        spec: the reading arguments (`ReadSpec`: batch size, image size (default 224; 299 for
            Inception V3), training, shards, dtype ('float32', 'bfloat16', 'float16'), seed,
            corrupt policy, shuffle buffer (default 10 000 records), repeat).
        **read: `ReadSpec` fields replacing the spec's (or making it, without `spec`).
        cycle_length: files read in parallel.
        file_pattern: a glob (relative to `data_dir`) to use instead of the split's names.
        train_preprocess: `(image_bytes, boxes, seed[2]) -> image` replacing
            `preprocessing.preprocess_for_train`.
        eval_preprocess: `image_bytes -> image` replacing `preprocessing.preprocess_for_eval`.
        num_classes: the model's classes: a record whose label is outside [0, num_classes)
            raises an error naming the label, the class count, the image and the record
            (`pipeline.label_check`; always, whatever `skip_corrupt`). None: not checked.
        preprocessing: the input recipe's knobs (`ImagePreprocessing`: crop ranges,
            evaluation crop, input scaling, resize method, flip, JPEG decoder options), for
            training or evaluation; None: `ImagePreprocessing()`, the NVIDIA ResNet-50 v1.5
            pipeline. Not with the split's `train_preprocess` / `eval_preprocess`, which
            replace the whole recipe.

    Returns:
        A `tf.data.Dataset`; see the module docstring for the element structure.

    Raises:
        FileNotFoundError: no `data_dir`, or no files of the split (says what was looked for).
        ValueError: bad arguments (`preprocessing` with the split's preprocess hook too); a
            truncated file when `skip_corrupt` is False.
        tf.errors.InvalidArgumentError: while reading: an undecodable image or a damaged
            record (when `skip_corrupt` is False), a label outside `num_classes`.
    """
    spec = read_spec(spec, split=split, **read).with_defaults(image_size=224, shuffle_buffer=10_000)
    transform, own = classification_recipe(
        spec,
        train_preprocess=train_preprocess,
        eval_preprocess=eval_preprocess,
        preprocessing=preprocessing,
        num_classes=num_classes,
    )
    files = list_split_files(data_dir, spec.require_split(), file_pattern)
    examples = RecordExamples(files, parse_imagenet_example, cycle_length)
    check = None if num_classes is None else label_check(num_classes)
    dataset = read_batches(examples, spec, transform, check=check)
    return _with_inputs(dataset, data_dir, spec.image_size, preprocessing, own=own)


def _with_inputs(
    dataset: tf.data.Dataset,
    data_dir: str | os.PathLike,
    image_size: int,
    preprocessing: ImagePreprocessing | None,
    *,
    own: Any,
) -> tf.data.Dataset:
    """`dataset` carrying its `ClassifierInputs` (`model_inputs`), unless the caller's own
    preprocess function made its images (then what it does is the caller's to state)."""
    if own is not None:
        return dataset
    inputs = ClassifierInputs(
        image_size, preprocessing or ImagePreprocessing(), class_names_of(data_dir)
    )
    return attach(dataset, inputs)
