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
    ClassifierInputs: what a classification pipeline does to [0, 255] RGB (resize rule,
        normalization, class names); `imagenet_dataset` attaches it to its dataset
        (`cvbench_inputs`) and a `Trainer` fitted on it writes model files that agree.

Where each concept lives, by flow stage (one room each; the top holds what several share):
    acquire/            raw data in: `download.py` (checked, resumable downloads),
                        `coco_download.py` (the COCO 2017 archives), `extract_imagenet.py`
                        (the ImageNet archives -> class folders; `imagenet_labels.py` the
                        devkit's labels).
    builders/           raw data -> TFRecords: `imagenet_builder.py`, `coco_builder.py` (named
                        so that `build_imagenet` / `build_coco` here are always the
                        functions, never the modules), `imagenet_layout.py` (the raw folders),
                        `coco_annotations.py` (the annotation files, checked),
                        `sharded_writer.py` (the generic parallel, resumable shard writer:
                        `write_sharded`, `SplitSpec`, `Skip`, `WriteSummary`; `manifest.py`
                        its manifest).
    read/               TFRecords -> batches: `spec.py` (`ReadSpec`, the reading arguments
                        every reader takes), `pipeline.py` (the reader skeleton
                        `read_batches(examples, spec, transform)`: an `ExampleSource` and a
                        `BatchTransform` -> batches, with the decode guard, shuffle, padding,
                        tf.data options), `reader.py` (`RecordExamples`: TFRecord files and a
                        parse function: list files, scan, rank split, read, lost-record
                        markers, parse), `ranks.py` (the rank rules, no TensorFlow:
                        `rank_seed`, `rank_range`, `eval_steps`), `corrupt.py` (raise or
                        skip-and-count corrupt input), `imagenet.py`, `tfds.py`, `coco.py` (one
                        reader each), `synthetic.py` (random batches), `preprocessing.py` (the
                        ImageNet augmentation; `image_preprocessing.py` its knobs),
                        `channel_means.py`, `mixup.py` (DLE's batch mixup:
                        `cvbench.data.read.mixup.mixup`).
    dali/               the DALI path: `pipeline.py` (same recipe), `dataset.py` (its batches).
    tfrecord.py         the TFRecord / tf.train.Example format and the ImageNet record keys.
    coco_schema.py      the COCO record layout: keys, writer, parser, records -> ground truth.
    coco_labels.py      `CocoLabelMap` and the COCO 2017 categories (no TensorFlow).
    dataset_info.py     the metadata file the builders write beside the records.
    dali_index.py       the index files DALI's reader needs (`DATA_DIR/idx/<shard>.idx`).
    image_io.py         image files: sniffing, decoding checks, re-encoding.
    safe_paths.py       the checks that keep names read from raw data inside their folders.
    worker_pool.py      an in-order `map` on worker processes; `default_num_workers`.
    _distributed.py     this process's shard (rank, number of ranks).

Stages import downward only: `read` and `builders` never import each other nor `acquire`;
`acquire` imports no other stage; `dali` may import `read`; the top modules import no stage.
The input-pipeline benchmark lives in `cvbench.benchmark.input_bench`.

Nothing here imports `cvbench.detection`, `cvbench.training`, `cvbench.tasks` or
`cvbench.models`: data flows one way, out of this package.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> (module, attribute in it).
_LAZY: dict[str, tuple[str, str]] = {
    "imagenet_dataset": ("cvbench.data.read.imagenet", "imagenet_dataset"),
    "imagenet_dali_dataset": ("cvbench.data.dali.dataset", "imagenet_dali_dataset"),
    "imagenet_dali_pipeline": ("cvbench.data.dali.pipeline", "imagenet_dali_pipeline"),
    "num_examples": ("cvbench.data.read.imagenet", "num_examples"),
    "tfds_dataset": ("cvbench.data.read.tfds", "tfds_dataset"),
    "coco_dataset": ("cvbench.data.read.coco", "coco_dataset"),
    "coco_num_examples": ("cvbench.data.read.coco", "num_examples"),
    "CocoLabelMap": ("cvbench.data.coco_labels", "CocoLabelMap"),
    "synthetic_arrays": ("cvbench.data.read.synthetic", "synthetic_arrays"),
    "synthetic_batches": ("cvbench.data.read.synthetic", "synthetic_batches"),
    "synthetic_dataset": ("cvbench.data.read.synthetic", "synthetic_dataset"),
    "build_imagenet": ("cvbench.data.builders.imagenet_builder", "build_imagenet"),
    "build_coco": ("cvbench.data.builders.coco_builder", "build_coco"),
    "build_coco_splits": ("cvbench.data.builders.coco_builder", "build_coco_splits"),
    "CorruptRecordCounter": ("cvbench.data.read.corrupt", "CorruptRecordCounter"),
    "DatasetInfo": ("cvbench.data.dataset_info", "DatasetInfo"),
    "read_dataset_info": ("cvbench.data.dataset_info", "read_dataset_info"),
    "ImagePreprocessing": ("cvbench.data.read.image_preprocessing", "ImagePreprocessing"),
    "ClassifierInputs": ("cvbench.data.read.model_inputs", "ClassifierInputs"),
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
