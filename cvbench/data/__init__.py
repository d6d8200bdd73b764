"""Input data: TFRecord builders and readers, tf.data pipelines, synthetic batches.

Importing this package does not import TensorFlow: each name below is loaded from its module
on first use, and the NumPy-only parts (`synthetic_arrays`, `synthetic_batches`, the image
sniffing of the builders) work without TensorFlow (for example under KERAS_BACKEND=jax).

Pipelines:
    imagenet_dataset: ImageNet-format TFRecords -> (images, labels) for training, or
        (images, labels, weights) for evaluation.
    tfds_dataset: the same from TensorFlow Datasets ('imagenet2012').
    synthetic_dataset, synthetic_arrays, synthetic_batches: one fixed random batch.
    num_examples: records in a split.
    CorruptRecordCounter: counts records skipped with skip_corrupt=True.

Builders:
    write_sharded, SplitSpec, Skip: the generic parallel, resumable shard writer.
    `cvbench.data.build_imagenet.build_imagenet`: a folder-per-class image set ->
    ImageNet-format TFRecords. (Not re-exported here: the function shares its module's name,
    so `cvbench.data.build_imagenet` would be the module or the function depending on what
    was imported first.)
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "imagenet_dataset": "cvbench.data.imagenet",
    "num_examples": "cvbench.data.imagenet",
    "tfds_dataset": "cvbench.data.tfds",
    "synthetic_arrays": "cvbench.data.synthetic",
    "synthetic_batches": "cvbench.data.synthetic",
    "synthetic_dataset": "cvbench.data.synthetic",
    "CorruptRecordCounter": "cvbench.data.corrupt",
    "write_sharded": "cvbench.data.sharded_writer",
    "SplitSpec": "cvbench.data.sharded_writer",
    "Skip": "cvbench.data.sharded_writer",
    "WriteSummary": "cvbench.data.sharded_writer",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cvbench.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
