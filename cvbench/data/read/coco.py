"""COCO TFRecords (TF Object Detection API format) -> `tf.data` batches for SSD320.

Reads `coco_<split>.record-NNNNN-of-NNNNN` files, as `cvbench.data.build_coco` (and the TF OD
API's `create_coco_tf_record.py`) write them; the record layout and its parser are in
`cvbench.data.coco_schema`. This module holds only what is COCO's: the SSD320 augmentation and
the element structure, plugged into the reader skeleton
(`cvbench.data.read.pipeline.read_batches`): reading (files, scan, rank split, corrupt
records) is `cvbench.data.read.reader.RecordExamples`, batching (parse and decode guard,
padding, options) `cvbench.data.read.pipeline`.

Class ids: records carry COCO category ids (1..90 with gaps: 80 are used). The model wants
contiguous indices `[0, num_classes)`; a `CocoLabelMap` holds the COCO id of each index.
SSD320 v1.2 uses 90 classes with index = COCO id - 1 (`CocoLabelMap.ssd320()`, the default;
the ten unused ids simply never occur); `CocoLabelMap.coco80()` is the compact 80-class map,
`CocoLabelMap.from_categories` one for any annotation file. Boxes whose id is not in the map
are dropped. Records without `image/object/class/label` (NVIDIA's copy of the OD API script
wrote only the names) get their ids from the COCO 2017 names.

Boxes are `[ymin, xmin, ymax, xmax]` normalized to [0, 1] (`cvbench.detection.box_ops`).

Images come out as RGB values in [0, 255], resized: the SSD320 model subtracts its channel
means (`MEAN_RGB`, i.e. `cvbench.data.read.channel_means.CAFFE_MEAN_RGB`) itself
(`subtract_mean=True` does it here instead, for models that do not).

Element structure:

* training: `(images, targets)`. images [B, S, S, 3] `dtype`; targets the `target_encoder`'s
  output batched (SSD: `{"boxes": [B, N, 5], "classes": [B, N, num_classes + 1]}` float32
  for N anchors, see `cvbench.detection.targets`), or without an encoder
  `{"boxes": [B, 100, 4] float32, "classes": [B, 100] int32 (-1 padding), "num_boxes": [B]
  int32}`. Endless (`repeat=True`), the last partial batch dropped. Recipe (SSD320 v1.2):
  random crop as the OD API's `random_crop_image` (aspect 0.75-3.0, area 0.75-1.0, no
  minimum object cover, overlap threshold 0: boxes entirely outside the crop are dropped,
  the others clipped to it), fused with the JPEG decode; random horizontal flip; fixed
  bilinear resize to S x S (aspect not kept); at most 100 boxes. `augmentation`
  (`DetectionAugmentation`) sets the crop ranges and turns the flip off or the OD API's colour
  jitter on (`cvbench.data.read.coco_augment`).
* evaluation: `(images, meta)`. meta: `image_id` [B] int64, `image_size` [B, 2] int32 (the
  original height, width), `valid` [B] bool. Every record appears exactly once across all
  ranks (each rank reads a contiguous range of the records); padding rows (`valid` False,
  `image_id` -1, zero image) fill the last batch and any batch up to `steps`, the same number
  on every rank (the dataset's cardinality).

Sharding across processes: `num_shards` / `shard_index`, by default the launcher's size and rank
(Horovod's, or `horovodrun`'s / `mpirun`'s variables before it starts). Training shards files
(records when there are fewer files than ranks). Corrupt input (truncated files, CRC errors,
undecodable JPEGs) raises an error naming the file, or with `skip_corrupt=True` is skipped and
counted.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from cvbench.data.coco_labels import COCO_2017_CATEGORIES, CocoLabelMap
from cvbench.data.coco_schema import category_name_table, parse_example, record_prefix
from cvbench.data.read.channel_means import CAFFE_MEAN_RGB
from cvbench.data.read.coco_augment import (
    CROP_AREA_RANGE,
    CROP_ASPECT_RATIO_RANGE,
    DetectionAugmentation,
    color_jitter,
)
from cvbench.data.read.pipeline import BatchTransform, check_args, read_batches
from cvbench.data.read.reader import RecordExamples, list_split_files, scan_files
from cvbench.data.read.spec import ReadSpec, read_spec
from cvbench.data.tfrecord import checked_boxes

__all__ = [
    "COCO_2017_CATEGORIES",
    "CROP_AREA_RANGE",
    "CROP_ASPECT_RATIO_RANGE",
    "MAX_BOXES",
    "MEAN_RGB",
    "CocoLabelMap",
    "DetectionAugmentation",
    "coco_dataset",
    "crop_boxes",
    "flip_boxes_left_right",
    "list_record_files",
    "num_examples",
    "pad_boxes",
    "sample_crop_window",
]

MAX_BOXES = 100
MEAN_RGB = CAFFE_MEAN_RGB  # subtracted with subtract_mean=True


def list_record_files(data_dir: str | os.PathLike, split: str) -> list[str]:
    """Sorted shard paths of `split` (`coco_<split>.record-NNNNN-of-NNNNN`) in `data_dir`
    (`cvbench.data.read.splits.list_split_files`).

    Raises:
        FileNotFoundError: no such folder or no such files (saying what was looked for and
            how to build them).
        BadFileError: an incomplete set of shards, or a 0-byte shard (a truncated copy).
    """
    try:
        return list_split_files(data_dir, record_prefix(split))
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e}; build COCO TFRecords with `cvbench build-coco`") from None


def num_examples(data_dir: str | os.PathLike, split: str, *, skip_corrupt: bool = True) -> int:
    """The number of complete records of a COCO split (reads only the record headers).

    Raises:
        BadFileError: with `skip_corrupt=False`, a truncated or damaged file, naming it.
    """
    files = list_record_files(data_dir, split)
    return sum(scan_files(files, skip_corrupt=skip_corrupt, counter=None))


def sample_crop_window(
    image_shape: tf.Tensor,
    boxes: tf.Tensor,
    seed: tf.Tensor,
    *,
    aspect_ratio_range: tuple[float, float] = CROP_ASPECT_RATIO_RANGE,
    area_range: tuple[float, float] = CROP_AREA_RANGE,
    min_object_covered: float = 0.0,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Samples an SSD random-crop window (OD API `random_crop_image`; SSD320: min object
    cover 0).

    Args:
        image_shape: int32 [3], `(height, width, channels)`.
        boxes: float32 [N, 4], normalized `[ymin, xmin, ymax, xmax]` (N may be 0).
        seed: int [2], the stateless random seed (same seed, same window).
        aspect_ratio_range: allowed crop width / height.
        area_range: allowed crop area as a fraction of the image area.
        min_object_covered: the crop must cover at least this fraction of some box.

    Returns:
        `crop` int32 [4] `(offset_y, offset_x, height, width)` in pixels (what
        `tf.image.decode_and_crop_jpeg` takes) and `window` float32 [4], the same crop as a
        normalized `[ymin, xmin, ymax, xmax]` box. When no window meets the constraints in 100
        attempts, the whole image.
    """
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        image_shape,
        bounding_boxes=tf.clip_by_value(tf.reshape(boxes, [1, -1, 4]), 0.0, 1.0),
        seed=seed,
        min_object_covered=min_object_covered,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=100,
        use_image_if_no_bounding_boxes=True,
    )
    crop = tf.stack([begin[0], begin[1], size[0], size[1]])
    hw = tf.cast(tf.tile(image_shape[:2], [2]), tf.float32)
    window = tf.cast(tf.concat([begin[:2], begin[:2] + size[:2]], 0), tf.float32) / hw
    return crop, window


def crop_boxes(boxes: tf.Tensor, window: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Boxes in a crop window's frame, as the OD API's `random_crop_image` (overlap 0) does.

    Boxes completely outside the window (touching its edge counts as outside) are dropped; the
    others are re-expressed relative to the window and clipped to [0, 1].

    Args:
        boxes: float32 [N, 4], normalized `[ymin, xmin, ymax, xmax]`.
        window: float32 [4], the crop as a normalized `[ymin, xmin, ymax, xmax]` box.

    Returns:
        `new_boxes` float32 [M, 4] (normalized to the window) and `keep` bool [N], which of the
        inputs survive (gather the other per-box fields with it).
    """
    ymin, xmin, ymax, xmax = tf.unstack(boxes, 4, axis=1)
    keep = (ymin < window[2]) & (xmin < window[3]) & (ymax > window[0]) & (xmax > window[1])
    kept = tf.boolean_mask(boxes, keep)
    origin = tf.tile(window[:2], [2])
    scale = tf.tile(window[2:] - window[:2], [2])
    return tf.clip_by_value((kept - origin) / scale, 0.0, 1.0), keep


def flip_boxes_left_right(boxes: tf.Tensor) -> tf.Tensor:
    """Mirrors normalized `[ymin, xmin, ymax, xmax]` boxes [N, 4]: x -> 1 - x."""
    ymin, xmin, ymax, xmax = tf.unstack(boxes, 4, axis=1)
    return tf.stack([ymin, 1.0 - xmax, ymax, 1.0 - xmin], axis=1)


def pad_boxes(
    boxes: tf.Tensor, classes: tf.Tensor, max_boxes: int = MAX_BOXES
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Keeps the first `max_boxes` boxes and pads to exactly that many.

    Args:
        boxes: float32 [N, 4]; classes: int32 [N].
        max_boxes: the fixed count.

    Returns:
        `boxes` float32 [max_boxes, 4] (zero rows as padding), `classes` int32 [max_boxes]
        (-1 as padding) and `num_boxes` int32 scalar (the real rows, first).
    """
    n = tf.minimum(tf.shape(boxes)[0], max_boxes)
    pad = max_boxes - n
    boxes = tf.pad(boxes[:n], [[0, pad], [0, 0]])
    classes = tf.pad(tf.cast(classes[:n], tf.int32), [[0, pad]], constant_values=-1)
    boxes.set_shape([max_boxes, 4])
    classes.set_shape([max_boxes])
    return boxes, classes, n


def _resize(image: tf.Tensor, image_size: int, dtype: tf.DType, subtract_mean: bool) -> tf.Tensor:
    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    if subtract_mean:
        image -= tf.constant(MEAN_RGB, tf.float32)
    return tf.cast(image, dtype)


def _train_transform(
    example: Mapping[str, tf.Tensor],
    *,
    image_size: int,
    class_table: tf.Tensor,
    drop_crowd: bool,
    dtype: tf.DType,
    subtract_mean: bool,
    augmentation: DetectionAugmentation,
) -> dict[str, tf.Tensor]:
    """Crop (fused with the JPEG decode), flip, colour jitter (each as `augmentation` says),
    resize; boxes mapped to classes, padded."""
    boxes = checked_boxes(example["boxes"])  # a damaged record's: named or skipped here
    classes = _to_indices(example["coco_ids"], class_table)
    keep = classes >= 0
    if drop_crowd:
        keep &= tf.logical_not(example["is_crowd"])
    boxes, classes = tf.boolean_mask(boxes, keep), tf.boolean_mask(classes, keep)

    crop_seed, flip_seed = tf.unstack(tf.random.split(example["seed"], 2))
    encoded = example["encoded"]
    a = augmentation
    crop, window = sample_crop_window(
        tf.image.extract_jpeg_shape(encoded),
        boxes,
        crop_seed,
        aspect_ratio_range=a.crop_aspect_range,
        area_range=a.crop_area_range,
        min_object_covered=a.crop_min_object_covered,
    )
    image = tf.image.decode_and_crop_jpeg(encoded, crop, channels=3)
    boxes, keep = crop_boxes(boxes, window)
    classes = tf.boolean_mask(classes, keep)

    if a.flip:
        flip = tf.random.stateless_uniform([], flip_seed) < 0.5
        image = tf.cond(flip, lambda: tf.image.flip_left_right(image), lambda: image)
        boxes = tf.cond(flip, lambda: flip_boxes_left_right(boxes), lambda: boxes)
    if a.color_jitter:
        image = color_jitter(image, example["seed"])

    boxes, classes, num_boxes = pad_boxes(boxes, classes)
    return {
        "image": _resize(image, image_size, dtype, subtract_mean),
        "boxes": boxes,
        "classes": classes,
        "num_boxes": num_boxes,
    }


def _eval_transform(
    example: Mapping[str, tf.Tensor], *, image_size: int, dtype: tf.DType, subtract_mean: bool
) -> dict[str, tf.Tensor]:
    with tf.control_dependencies([checked_boxes(example["boxes"])]):  # as in training
        image = tf.image.decode_jpeg(example["encoded"], channels=3)
    return {
        "image": _resize(image, image_size, dtype, subtract_mean),
        "image_id": example["image_id"],
        "image_size": tf.shape(image)[:2],
        "valid": tf.constant(True),
    }


def _to_indices(coco_ids: tf.Tensor, class_table: tf.Tensor) -> tf.Tensor:
    """COCO ids [N] -> class indices int32 [N] through the label map's table, -1 if unmapped."""
    n = tf.cast(tf.shape(class_table)[0], tf.int64)
    inside = (coco_ids >= 0) & (coco_ids < n)
    return tf.where(inside, tf.gather(class_table, tf.clip_by_value(coco_ids, 0, n - 1)), -1)


def coco_dataset(
    data_dir: str | os.PathLike,
    split: str | None = None,
    *,
    spec: ReadSpec | None = None,
    label_map: CocoLabelMap | None = None,
    target_encoder: Callable[[tf.Tensor, tf.Tensor], Any] | None = None,
    drop_crowd: bool = False,
    subtract_mean: bool = False,
    augmentation: DetectionAugmentation | None = None,
    cycle_length: int = 10,
    **read: Any,
) -> tf.data.Dataset:
    """A training or evaluation pipeline over COCO TFRecords (see the module docstring).

    Args:
        data_dir: the folder of `coco_<split>.record-NNNNN-of-NNNNN`.
        split: "train", "val" or another split name the builder wrote; None: `spec.split`.
        spec: the reading arguments (`ReadSpec`): the image size is the square model input
            side S (default 320, for SSD320; at least 32), the shuffle buffer defaults to
            2048 records; training: crop, flip, shuffle, repeat, drop remainder; evaluation:
            resize only, every record once, padding marked.
        label_map: COCO id <-> class index; default `CocoLabelMap.ssd320()` (90 classes).
        target_encoder: training only: `target_encoder(boxes, classes)` per example (boxes
            float32 [100, 4] with zero padding rows, classes int32 [100] with -1 padding), e.g.
            `cvbench.detection.targets.TargetEncoder(multiscale_anchors(S), num_classes)`.
            None: the padded boxes are the targets.
        drop_crowd: training only: leave out `is_crowd` boxes (the reference keeps them).
        subtract_mean: subtract the SSD320 channel means here (the ssd320 model does it).
        augmentation: training only: crop, flip and colour jitter settings
            (`cvbench.data.read.coco_augment.DetectionAugmentation`); default SSD320 v1.2's.
        cycle_length: files read in parallel.
        **read: `ReadSpec` fields replacing the spec's (or making it, without `spec`).

    Returns:
        A `tf.data.Dataset` of the element structure in the module docstring.

    Raises:
        ValueError: bad arguments; a truncated file when `skip_corrupt` is False.
        FileNotFoundError: no folder or no records of `split`.
    """
    spec = read_spec(spec, split=split, **read).with_defaults(image_size=320, shuffle_buffer=2048)
    split, image_size = spec.require_split(), spec.image_size
    tf_dtype = check_args(spec.dtype)
    if image_size < 32:
        raise ValueError(f"image_size must be >= 32, got {image_size}")
    name_to_id = category_name_table()
    examples = RecordExamples(
        list_record_files(data_dir, split),
        lambda record: parse_example(record, name_to_id),
        cycle_length,
        shuffles=False,  # the batches are shuffled (after the repeat), with spec.shuffle_buffer
    )
    settings = {"image_size": image_size, "dtype": tf_dtype, "subtract_mean": subtract_mean}
    if not spec.training:
        return read_batches(examples, spec, _eval_batch_transform(**settings))
    augment = {"drop_crowd": drop_crowd, "augmentation": augmentation or DetectionAugmentation()}
    transform = _train_batch_transform({**settings, **augment}, label_map, target_encoder)
    return read_batches(examples, spec, transform)


def _train_batch_transform(
    settings: dict, label_map: CocoLabelMap | None, target_encoder: Callable | None
) -> BatchTransform:
    """Training: `_train_transform` with the reader's `settings` and the label map's class
    table (default SSD320's 90 classes); `(image, targets)` elements."""
    class_table = tf.constant((label_map or CocoLabelMap.ssd320()).index_table())
    return BatchTransform(
        functools.partial(_train_transform, class_table=class_table, **settings),
        _encoded_targets(target_encoder),
    )


def _eval_batch_transform(
    *, image_size: int, dtype: tf.DType, subtract_mean: bool
) -> BatchTransform:
    """Evaluation: decode and resize each record; `(image, meta)` elements, padded with a zero
    image and `valid` False, `image_id` -1."""
    pad = {
        "image_id": tf.constant(-1, tf.int64),
        "image_size": tf.constant([0, 0], tf.int32),
        "valid": tf.constant(False),
    }
    return BatchTransform(
        lambda e: _eval_transform(
            e, image_size=image_size, dtype=dtype, subtract_mean=subtract_mean
        ),
        _split_image,
        pad=(tf.zeros([image_size, image_size, 3], dtype), pad),
    )


def _encoded_targets(target_encoder: Callable[[tf.Tensor, tf.Tensor], Any] | None) -> Callable:
    """Training `to_element`: `(image, padded boxes)`, or `(image, target_encoder(boxes,
    classes))` with an encoder."""

    def to_element(out: dict, example: dict) -> tuple[tf.Tensor, Any]:
        image, padded = _split_image(out, example)
        if target_encoder is None:
            return image, padded
        return image, target_encoder(padded["boxes"], padded["classes"])

    return to_element


def _split_image(out: dict, example: dict) -> tuple[tf.Tensor, dict]:
    """`(image, the rest)` of a transform's output dict."""
    del example
    return out["image"], {k: v for k, v in out.items() if k != "image"}
