"""Input data: TFRecord builders and readers, tf.data pipelines, synthetic batches.

Importing this package does not import TensorFlow: each name below is loaded from its module
on first use, and the NumPy-only parts (`synthetic_arrays`, `synthetic_batches`, the label
map, the image sniffing of the builders) work without TensorFlow (for example under
KERAS_BACKEND=jax).

Public names (the ends of the flows):
    imagenet_dataset: ImageNet-format TFRecords -> (images, labels) for training, or
        (images, labels, weights) for evaluation. `num_examples`: records in a split.
    imagenet_dali_dataset: the same batches from the same records through NVIDIA DALI
        (`pip install ".[dali]"`; CPU decoding, or nvJPEG on a GPU);
        `imagenet_dali_pipeline`: the DALI pipeline itself.
    tfds_dataset: the same from TensorFlow Datasets ('imagenet2012').
    coco_dataset: COCO TFRecords -> SSD320 training or evaluation batches.
        `coco_num_examples`: records in a COCO split. `CocoLabelMap`: COCO ids <-> classes.
    synthetic_dataset, synthetic_arrays, synthetic_batches: one fixed random batch.
    build_imagenet: a folder-per-class image set -> ImageNet-format TFRecords.
    build_coco, build_coco_splits: COCO annotations and images -> COCO TFRecords.
    CorruptRecordCounter: counts records skipped with skip_corrupt=True.
    DatasetInfo, read_dataset_info: the builders' `dataset_info.json` beside the records
        (classes in label order with names and counts, label offset, image policy).

Where each concept lives:
    reader.py           the record-reading skeleton every TFRecord reader uses: list files,
                        scan, rank split (files or records; contiguous ranges for
                        evaluation), read, lost-record markers, parse; `rank_seed`.
    pipeline.py         examples -> batches: the decode guard, shuffle and per-example seeds,
                        padding to a fixed step count, tf.data options; the classification
                        instances `train_pipeline` / `eval_pipeline`.
    corrupt.py          raise or skip-and-count corrupt input (`checked_map`, `guarded_map`,
                        `apply_policy`).
    imagenet.py, tfds.py, coco.py
                        one reader each: its parse, its augmentation, a call into the above.
    preprocessing.py    the ImageNet (NVIDIA ResNet-50 v1.5) augmentation and normalization;
                        image_preprocessing.py its knobs (`ImagePreprocessing`, no TensorFlow).
    channel_means.py    the per-channel RGB means and stds, defined once.
    tfrecord.py         the TFRecord / tf.train.Example format and the ImageNet record keys.
    coco_schema.py      the COCO record layout: keys, writer, parser, records -> ground truth.
    coco_labels.py      `CocoLabelMap` and the COCO 2017 categories (no TensorFlow).
    imagenet_builder.py, coco_builder.py
                        the builders (named so that `build_imagenet` / `build_coco` here are
                        always the functions, never the modules); coco_annotations.py the
                        annotation files they read, checked.
    dataset_info.py     the metadata file the builders write beside the records.
    mixup.py            DLE's batch mixup (a Beta weight per image, reversed partners;
                        `cvbench.data.mixup.mixup`: the module keeps its name).
    sharded_writer.py   the generic parallel, resumable shard writer (`write_sharded`,
                        `SplitSpec`, `Skip`, `WriteSummary`) the builders share;
                        worker_pool.py its in-order `map` on worker processes.
    imagenet_layout.py, image_io.py, extract_imagenet.py, download.py
                        raw folders, image files, archives and downloads; safe_paths.py
                        the checks that keep names read from them inside their folders.
    dali.py, dali_dataset.py, dali_index.py
                        the DALI path: its pipeline (same recipe), the batches, the index
                        files DALI's reader needs (`DATA_DIR/idx/<shard>.idx`).
    synthetic.py        random batches; input_bench.py the input-pipeline benchmark
                        (tf.data against DALI CPU).

Nothing here imports `cvbench.detection`, `cvbench.training`, `cvbench.tasks` or
`cvbench.models`: data flows one way, out of this package.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> (module, attribute in it).
_LAZY: dict[str, tuple[str, str]] = {
    "imagenet_dataset": ("cvbench.data.imagenet", "imagenet_dataset"),
    "imagenet_dali_dataset": ("cvbench.data.dali_dataset", "imagenet_dali_dataset"),
    "imagenet_dali_pipeline": ("cvbench.data.dali", "imagenet_dali_pipeline"),
    "num_examples": ("cvbench.data.imagenet", "num_examples"),
    "tfds_dataset": ("cvbench.data.tfds", "tfds_dataset"),
    "coco_dataset": ("cvbench.data.coco", "coco_dataset"),
    "coco_num_examples": ("cvbench.data.coco", "num_examples"),
    "CocoLabelMap": ("cvbench.data.coco_labels", "CocoLabelMap"),
    "synthetic_arrays": ("cvbench.data.synthetic", "synthetic_arrays"),
    "synthetic_batches": ("cvbench.data.synthetic", "synthetic_batches"),
    "synthetic_dataset": ("cvbench.data.synthetic", "synthetic_dataset"),
    "build_imagenet": ("cvbench.data.imagenet_builder", "build_imagenet"),
    "build_coco": ("cvbench.data.coco_builder", "build_coco"),
    "build_coco_splits": ("cvbench.data.coco_builder", "build_coco_splits"),
    "CorruptRecordCounter": ("cvbench.data.corrupt", "CorruptRecordCounter"),
    "DatasetInfo": ("cvbench.data.dataset_info", "DatasetInfo"),
    "read_dataset_info": ("cvbench.data.dataset_info", "read_dataset_info"),
    "ImagePreprocessing": ("cvbench.data.image_preprocessing", "ImagePreprocessing"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'cvbench.data' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
