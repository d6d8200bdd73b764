"""COCO TFRecords (TF Object Detection API format) to batches for SSD320.

Records are those `cvbench.data.build_coco` writes (and the TF OD API's
`create_coco_tf_record.py`): `coco_train.record-?????-of-?????` and `coco_val.record-…`.

Class ids: records carry COCO category ids (1..90, with gaps: 80 are used). The model wants
contiguous indices `[0, num_classes)`; a `CocoLabelMap` holds the COCO id of each index.
SSD320 v1.2 uses 90 classes with index = COCO id - 1 (`CocoLabelMap.ssd320()`; the ten unused
ids simply never occur); `CocoLabelMap.coco80()` is the compact 80-class map. Boxes whose id is
not in the map are dropped.

Boxes inside the pipeline are `[ymin, xmin, ymax, xmax]` normalized to [0, 1], the format of
`cvbench.detection.box_ops`.

Training (SSD320 v1.2 recipe): decode, random crop as the OD API's `random_crop_image`
(aspect 0.75-3.0, area 0.75-1.0, min object cover 0, overlap threshold 0: boxes completely
outside the crop dropped, the others clipped to it), random horizontal flip, fixed resize to
`image_size` x `image_size` (aspect not kept, bilinear), mean subtraction (123.68, 116.779,
103.939), boxes padded to 100, per-anchor targets.

Evaluation: decode, resize, mean subtraction; every record exactly once across all Horovod
ranks (records are dealt round-robin), no dropped remainder: the last batch is filled with
padding marked `valid = False`.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

SPLITS: dict[str, str] = {"train": "coco_train.record", "val": "coco_val.record"}
MAX_BOXES = 100
MEAN_RGB: tuple[float, float, float] = (123.68, 116.779, 103.939)
CROP_ASPECT_RATIO_RANGE: tuple[float, float] = (0.75, 3.0)
CROP_AREA_RANGE: tuple[float, float] = (0.75, 1.0)

# Feature keys of the TF OD API COCO records.
HEIGHT = "image/height"
WIDTH = "image/width"
FILENAME = "image/filename"
SOURCE_ID = "image/source_id"
KEY_SHA256 = "image/key/sha256"
ENCODED = "image/encoded"
FORMAT = "image/format"
BBOX_XMIN = "image/object/bbox/xmin"
BBOX_XMAX = "image/object/bbox/xmax"
BBOX_YMIN = "image/object/bbox/ymin"
BBOX_YMAX = "image/object/bbox/ymax"
CLASS_TEXT = "image/object/class/text"
CLASS_LABEL = "image/object/class/label"
IS_CROWD = "image/object/is_crowd"
AREA = "image/object/area"

# The 80 category ids of COCO 2017 detection and their names.
COCO_2017_CATEGORIES: tuple[tuple[int, str], ...] = (
    (1, "person"), (2, "bicycle"), (3, "car"), (4, "motorcycle"), (5, "airplane"), (6, "bus"),
    (7, "train"), (8, "truck"), (9, "boat"), (10, "traffic light"), (11, "fire hydrant"),
    (13, "stop sign"), (14, "parking meter"), (15, "bench"), (16, "bird"), (17, "cat"),
    (18, "dog"), (19, "horse"), (20, "sheep"), (21, "cow"), (22, "elephant"), (23, "bear"),
    (24, "zebra"), (25, "giraffe"), (27, "backpack"), (28, "umbrella"), (31, "handbag"),
    (32, "tie"), (33, "suitcase"), (34, "frisbee"), (35, "skis"), (36, "snowboard"),
    (37, "sports ball"), (38, "kite"), (39, "baseball bat"), (40, "baseball glove"),
    (41, "skateboard"), (42, "surfboard"), (43, "tennis racket"), (44, "bottle"),
    (46, "wine glass"), (47, "cup"), (48, "fork"), (49, "knife"), (50, "spoon"), (51, "bowl"),
    (52, "banana"), (53, "apple"), (54, "sandwich"), (55, "orange"), (56, "broccoli"),
    (57, "carrot"), (58, "hot dog"), (59, "pizza"), (60, "donut"), (61, "cake"), (62, "chair"),
    (63, "couch"), (64, "potted plant"), (65, "bed"), (67, "dining table"), (70, "toilet"),
    (72, "tv"), (73, "laptop"), (74, "mouse"), (75, "remote"), (76, "keyboard"),
    (77, "cell phone"), (78, "microwave"), (79, "oven"), (80, "toaster"), (81, "sink"),
    (82, "refrigerator"), (84, "book"), (85, "clock"), (86, "vase"), (87, "scissors"),
    (88, "teddy bear"), (89, "hair drier"), (90, "toothbrush"),
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class CocoLabelMap:
    """Maps contiguous class indices `[0, num_classes)` to COCO category ids and back.

    Attributes:
        category_ids: the COCO category id of each class index, in index order.

    Example:
        >>> lm = CocoLabelMap.ssd320()
        >>> lm.num_classes, lm.category_ids[0], lm.category_ids[89]
        (90, 1, 90)
        >>> CocoLabelMap.coco80().to_indices([1, 90, 12]).tolist()
        [0, 79, -1]
    """

    category_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        ids = tuple(int(i) for i in self.category_ids)
        if not ids or min(ids) < 1 or len(set(ids)) != len(ids):
            raise ValueError(
                f"category_ids must be unique positive integers, got {self.category_ids!r}"
            )
        object.__setattr__(self, "category_ids", ids)

    @classmethod
    def ssd320(cls) -> CocoLabelMap:
        """SSD320 v1.2's map: 90 classes, index = COCO id - 1."""
        return cls(tuple(range(1, 91)))

    @classmethod
    def coco80(cls) -> CocoLabelMap:
        """The 80 categories of COCO 2017 in id order."""
        return cls(tuple(i for i, _ in COCO_2017_CATEGORIES))

    @property
    def num_classes(self) -> int:
        return len(self.category_ids)

    def index_table(self) -> np.ndarray:
        """int32 array of length max id + 1: the class index of each COCO id, -1 if unmapped."""
        table = np.full(max(self.category_ids) + 1, -1, np.int32)
        table[list(self.category_ids)] = np.arange(self.num_classes, dtype=np.int32)
        return table

    def to_indices(self, coco_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """COCO ids -> class indices (int32), -1 for ids not in the map."""
        ids = np.asarray(coco_ids, np.int64)
        table = self.index_table()
        inside = (ids >= 0) & (ids < len(table))
        return np.where(inside, table[np.clip(ids, 0, len(table) - 1)], -1).astype(np.int32)

    def to_coco_ids(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Class indices -> COCO ids (int64)."""
        idx = np.asarray(indices, np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_classes):
            raise ValueError(f"class indices must be in [0, {self.num_classes}), got {idx}")
        return np.asarray(self.category_ids, np.int64)[idx]


def record_pattern(split: str) -> str:
    """The file-name glob of a split's shards, e.g. `coco_val.record-*-of-*`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    return f"{SPLITS[split]}-?????-of-?????"


def list_record_files(data_dir: str | os.PathLike, split: str) -> list[str]:
    """Sorted shard paths of `split` in `data_dir`.

    Raises:
        FileNotFoundError: if there are none (naming the directory and the pattern).
    """
    pattern = os.path.join(os.fspath(data_dir), record_pattern(split))
    files = sorted(glob.glob(pattern))
    if not files:
        raise FileNotFoundError(
            f"no COCO {split} TFRecords matching {pattern!r}; build them with `cvbench build-coco`"
        )
    return files


def feature_spec() -> dict[str, Any]:
    """The parsing spec of the features the readers use (object lists variable-length)."""
    return {
        ENCODED: tf.io.FixedLenFeature([], tf.string),
        HEIGHT: tf.io.FixedLenFeature([], tf.int64),
        WIDTH: tf.io.FixedLenFeature([], tf.int64),
        SOURCE_ID: tf.io.FixedLenFeature([], tf.string),
        BBOX_YMIN: tf.io.VarLenFeature(tf.float32),
        BBOX_XMIN: tf.io.VarLenFeature(tf.float32),
        BBOX_YMAX: tf.io.VarLenFeature(tf.float32),
        BBOX_XMAX: tf.io.VarLenFeature(tf.float32),
        CLASS_LABEL: tf.io.VarLenFeature(tf.int64),
        CLASS_TEXT: tf.io.VarLenFeature(tf.string),
        IS_CROWD: tf.io.VarLenFeature(tf.int64),
        AREA: tf.io.VarLenFeature(tf.float32),
    }


def parse_example(
    serialized: tf.Tensor, name_to_id: tf.lookup.StaticHashTable | None = None
) -> dict[str, tf.Tensor]:
    """Parses one serialized record.

    Args:
        serialized: a string scalar.
        name_to_id: category name -> COCO id, used when a record lacks
            `image/object/class/label` (NVIDIA's COCO records wrote only the names); see
            `category_name_table`. Without it such boxes get id -1 (dropped later).

    Returns:
        A dict: `encoded` (string scalar, JPEG bytes), `image_id` (int64 scalar, from
        `image/source_id`), `height`/`width` (int64 scalars, as recorded), `boxes` (float32
        [N, 4], normalized `[ymin, xmin, ymax, xmax]`), `coco_ids` (int64 [N]), `is_crowd`
        (bool [N]), `area` (float32 [N], pixels).
    """
    f = tf.io.parse_single_example(serialized, feature_spec())
    dense = {k: tf.sparse.to_dense(v) for k, v in f.items() if isinstance(v, tf.SparseTensor)}
    boxes = tf.stack([dense[BBOX_YMIN], dense[BBOX_XMIN], dense[BBOX_YMAX], dense[BBOX_XMAX]], 1)
    n = tf.shape(boxes)[0]
    coco_ids = dense[CLASS_LABEL]
    if name_to_id is not None:
        by_name = name_to_id.lookup(dense[CLASS_TEXT])
        coco_ids = tf.cond(tf.shape(coco_ids)[0] == n, lambda: coco_ids, lambda: by_name)
    return {
        "encoded": f[ENCODED],
        "image_id": tf.strings.to_number(f[SOURCE_ID], tf.int64),
        "height": f[HEIGHT],
        "width": f[WIDTH],
        "boxes": tf.reshape(boxes, [-1, 4]),
        "coco_ids": _pad_like(coco_ids, n, -1),
        # Old records without is_crowd/area: treat every box as not crowd.
        "is_crowd": _pad_like(dense[IS_CROWD], n, 0) > 0,
        "area": _pad_like(dense[AREA], n, 0.0),
    }


def _pad_like(values: tf.Tensor, n: tf.Tensor, fill: Any) -> tf.Tensor:
    return tf.cond(
        tf.shape(values)[0] == n,
        lambda: values,
        lambda: tf.fill([n], tf.constant(fill, values.dtype)),
    )


def category_name_table() -> tf.lookup.StaticHashTable:
    """A table from COCO 2017 category names (bytes) to their ids (int64), default -1."""
    names, ids = zip(*((n, i) for i, n in COCO_2017_CATEGORIES), strict=True)
    init = tf.lookup.KeyValueTensorInitializer(
        tf.constant(names), tf.constant(ids, tf.int64), tf.string, tf.int64
    )
    return tf.lookup.StaticHashTable(init, default_value=-1)


def sample_crop_window(
    image_shape: tf.Tensor,
    boxes: tf.Tensor,
    *,
    aspect_ratio_range: tuple[float, float] = CROP_ASPECT_RATIO_RANGE,
    area_range: tuple[float, float] = CROP_AREA_RANGE,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Samples an SSD random-crop window (OD API `random_crop_image`, min object cover 0).

    Args:
        image_shape: int32 [3], `(height, width, channels)`.
        boxes: float32 [N, 4], normalized `[ymin, xmin, ymax, xmax]` (N may be 0).
        aspect_ratio_range: allowed crop width / height.
        area_range: allowed crop area as a fraction of the image area.

    Returns:
        `crop` int32 [4] `(offset_y, offset_x, height, width)` in pixels (what
        `tf.image.decode_and_crop_jpeg` takes) and `window` float32 [4], the same crop as a
        normalized `[ymin, xmin, ymax, xmax]` box. When no window meets the constraints in 100
        attempts, the whole image.
    """
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        image_shape,
        bounding_boxes=tf.clip_by_value(tf.reshape(boxes, [1, -1, 4]), 0.0, 1.0),
        min_object_covered=0.0,
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


def normalize_image(image: tf.Tensor) -> tf.Tensor:
    """Subtracts the SSD320 channel means (RGB, 0-255 scale); float32 out."""
    return tf.cast(image, tf.float32) - tf.constant(MEAN_RGB, tf.float32)


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


def _preprocess_train(
    example: Mapping[str, tf.Tensor], *, image_size: int, class_table: tf.Tensor, drop_crowd: bool
) -> dict[str, tf.Tensor]:
    """Crop (fused with the JPEG decode), flip, resize, normalize; boxes padded to 100."""
    boxes, classes = example["boxes"], _to_indices(example["coco_ids"], class_table)
    keep = classes >= 0
    if drop_crowd:
        keep &= tf.logical_not(example["is_crowd"])
    boxes, classes = tf.boolean_mask(boxes, keep), tf.boolean_mask(classes, keep)

    crop, window = sample_crop_window(tf.image.extract_jpeg_shape(example["encoded"]), boxes)
    image = tf.image.decode_and_crop_jpeg(example["encoded"], crop, channels=3)
    boxes, keep = crop_boxes(boxes, window)
    classes = tf.boolean_mask(classes, keep)

    flip = tf.random.uniform([]) < 0.5
    image = tf.cond(flip, lambda: tf.image.flip_left_right(image), lambda: image)
    boxes = tf.cond(flip, lambda: flip_boxes_left_right(boxes), lambda: boxes)

    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    boxes, classes, num_boxes = pad_boxes(boxes, classes)
    return {"image": normalize_image(image), "boxes": boxes, "classes": classes,
            "num_boxes": num_boxes}  # fmt: skip


def _preprocess_eval(example: Mapping[str, tf.Tensor], *, image_size: int) -> dict[str, tf.Tensor]:
    image = tf.image.decode_jpeg(example["encoded"], channels=3)
    size = tf.shape(image)[:2]
    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    return {
        "image": normalize_image(image),
        "image_id": example["image_id"],
        "image_size": tf.cast(size, tf.int32),
        "valid": tf.constant(True),
    }


def _to_indices(coco_ids: tf.Tensor, class_table: tf.Tensor) -> tf.Tensor:
    """COCO ids [N] -> class indices int32 [N] through the label map's table, -1 if unmapped."""
    n = tf.cast(tf.shape(class_table)[0], tf.int64)
    inside = (coco_ids >= 0) & (coco_ids < n)
    return tf.where(inside, tf.gather(class_table, tf.clip_by_value(coco_ids, 0, n - 1)), -1)


def horovod_shard() -> tuple[int, int]:
    """`(num_shards, index)` = (Horovod size, rank) when Horovod is initialised, else (1, 0)."""
    try:
        import horovod.tensorflow as hvd
    except ImportError:
        return 1, 0
    try:
        return (hvd.size(), hvd.rank()) if hvd.is_initialized() else (1, 0)
    except ValueError:  # Horovod built without TensorFlow ops or not initialised
        return 1, 0


def coco_dataset(
    data_dir: str | os.PathLike,
    split: str,
    *,
    batch_size: int,
    image_size: int = 320,
    training: bool,
    label_map: CocoLabelMap | None = None,
    target_encoder: Callable[[tf.Tensor, tf.Tensor], Any] | None = None,
    drop_crowd: bool = False,
    shuffle_buffer: int = 2048,
    repeat: bool = True,
    shard: tuple[int, int] | None = None,
    num_parallel_calls: int = tf.data.AUTOTUNE,
) -> tf.data.Dataset:
    """COCO TFRecords -> batches for SSD320 training or evaluation.

    Args:
        data_dir: the folder holding `coco_{train,val}.record-?????-of-?????`.
        split: "train" or "val" (which files are read; `training` picks the transform).
        batch_size: images per batch (per Horovod rank).
        image_size: the square model input side (320 for SSD320).
        training: True for the augmented, shuffled, repeated training stream; False for the
            deterministic evaluation stream (every record once, across ranks too).
        label_map: COCO id <-> class index (default `CocoLabelMap.ssd320()`, 90 classes).
        target_encoder: training only; called as `target_encoder(boxes, classes)` on each
            example (boxes float32 [100, 4] normalized `[ymin, xmin, ymax, xmax]`, zero rows
            as padding; classes int32 [100], -1 as padding), its result becomes the example's
            targets: for SSD, `cvbench.detection.targets.TargetEncoder(anchors, num_classes)`.
            None keeps the padded boxes.
        drop_crowd: training only; drop `is_crowd` boxes (the reference trains on them).
        shuffle_buffer: training shuffle buffer, in examples.
        repeat: training only; repeat the data indefinitely.
        shard: `(num_shards, index)`; default: Horovod `(size, rank)` when initialised, else
            `(1, 0)`. Training deals out whole files when there are at least as many files as
            shards (records otherwise); evaluation deals out records round-robin.
        num_parallel_calls: parallelism of the decode map.

    Returns:
        Training: `(images, targets)`; images float32 [B, S, S, 3] (mean-subtracted RGB),
        targets the encoder's output batched (SSD: `boxes` float32 [B, N, 5], `classes`
        float32 [B, N, num_classes + 1] for N anchors), or without encoder a dict `boxes` float32
        [B, 100, 4], `classes` int32 [B, 100] (-1 padding), `num_boxes` int32 [B]. Batches are
        full (remainder dropped, the stream repeats).

        Evaluation: `(images, meta)`; meta a dict `image_id` int64 [B], `image_size` int32
        [B, 2] (original height, width), `valid` bool [B]. The last batch is filled with
        padding (`valid` False, `image_id` -1, zero image); a rank with R records yields
        ceil(R / B) batches.

    Raises:
        ValueError: on a bad split, batch size, image size or shard.
        FileNotFoundError: if `data_dir` holds no records of `split`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if image_size < 32:
        raise ValueError(f"image_size must be >= 32, got {image_size}")
    num_shards, index = shard if shard is not None else horovod_shard()
    if not 0 <= index < num_shards:
        raise ValueError(f"shard index must be in [0, {num_shards}), got {shard}")
    files = list_record_files(data_dir, split)
    label_map = label_map or CocoLabelMap.ssd320()
    name_to_id = category_name_table()

    def parse(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        return parse_example(serialized, name_to_id)

    if not training:
        ds = tf.data.TFRecordDataset(files).shard(num_shards, index)
        ds = ds.map(parse, num_parallel_calls=num_parallel_calls, deterministic=True)
        ds = ds.map(
            lambda ex: _preprocess_eval(ex, image_size=image_size),
            num_parallel_calls=num_parallel_calls,
            deterministic=True,
        )
        ds = ds.concatenate(_eval_padding(image_size, batch_size - 1))
        ds = ds.batch(batch_size, drop_remainder=True)
        ds = ds.map(lambda b: (b.pop("image"), b))
        return ds.prefetch(tf.data.AUTOTUNE)

    class_table = tf.constant(label_map.index_table())
    ds = tf.data.Dataset.from_tensor_slices(files)
    if len(files) >= num_shards:
        ds = ds.shard(num_shards, index).shuffle(len(files), reshuffle_each_iteration=True)
        ds = ds.interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(len(files), 16),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=False,
        )
    else:
        ds = ds.flat_map(tf.data.TFRecordDataset).shard(num_shards, index)
    ds = ds.shuffle(shuffle_buffer, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()

    def preprocess(serialized: tf.Tensor) -> tuple[tf.Tensor, Any]:
        ex = _preprocess_train(
            parse(serialized), image_size=image_size, class_table=class_table,
            drop_crowd=drop_crowd,
        )  # fmt: skip
        image = ex.pop("image")
        if target_encoder is None:
            return image, ex
        return image, target_encoder(ex["boxes"], ex["classes"])

    ds = ds.map(preprocess, num_parallel_calls=num_parallel_calls, deterministic=False)
    ds = ds.batch(batch_size, drop_remainder=True)
    return ds.prefetch(tf.data.AUTOTUNE)


def _eval_padding(image_size: int, count: int) -> tf.data.Dataset:
    """`count` padding examples shaped like `_preprocess_eval`'s, marked `valid = False`."""
    pad = {
        "image": tf.zeros([image_size, image_size, 3], tf.float32),
        "image_id": tf.constant(-1, tf.int64),
        "image_size": tf.constant([0, 0], tf.int32),
        "valid": tf.constant(False),
    }
    return tf.data.Dataset.from_tensors(pad).repeat(count)
