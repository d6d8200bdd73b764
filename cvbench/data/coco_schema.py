"""The COCO record schema, in one place: what the builder writes and what the readers parse.

One `tf.train.Example` per image, in the TF Object Detection API layout (as its
`create_coco_tf_record.py` writes it), in files `coco_<split>.record-NNNNN-of-NNNNN`:

    image/height, image/width               int64
    image/filename, image/source_id         bytes (source_id = str(image id))
    image/key/sha256                        bytes (hex digest of image/encoded)
    image/encoded, image/format             the original JPEG bytes, b"jpeg"
    image/object/bbox/{xmin,xmax,ymin,ymax} float lists, normalized to [0, 1]
    image/object/class/text                 bytes list, category names
    image/object/class/label                int64 list, COCO category ids (NVIDIA's copy of
                                            the OD API script forgot to write this one)
    image/object/is_crowd                   int64 list
    image/object/area                       float list, pixels (the annotation's area)

Here (after TF Model Garden's `tf_example_feature_key.py`, one schema for writer and readers):

* the feature keys and the shard-name pattern;
* `CocoImage` / `CocoObject`, one record in Python, and `coco_example`, its writer (pure
  Python: the builder's worker processes never import TensorFlow);
* `feature_spec` and `parse_example`, the reader's side (`cvbench.data.read.coco`), with
  `category_name_table` for records that carry only the category names;
* `groundtruth_from_records`: a split's records back to a COCO annotation dict, for the
  evaluation (`cvbench.detection.coco_eval.evaluate_coco`) when the annotation file is missing.

Importing this module does not import TensorFlow; the reading functions import it when called.
Boxes are normalized `[ymin, xmin, ymax, xmax]` (the internal box format of
`cvbench.detection.box_ops`); COCO `[x, y, w, h]` pixels appear only in the ground truth.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cvbench.data.coco_labels import COCO_2017_CATEGORIES
from cvbench.data.safe_paths import check_split_name
from cvbench.data.tfrecord import (
    DAMAGED_BOXES,
    box_lists_differ,
    bytes_feature,
    encode_example,
    float_feature,
    int64_feature,
    stack_boxes,
)
from cvbench.utils.errors import BadFileError

if TYPE_CHECKING:
    import tensorflow as tf

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

BBOX_KEYS = (BBOX_YMIN, BBOX_XMIN, BBOX_YMAX, BBOX_XMAX)  # the internal box order
SHARD_PATTERN = "coco_{split}.record-{index:05d}-of-{num_shards:05d}"


def record_prefix(split: str) -> str:
    """The shard-name prefix of a split: `coco_<split>.record`.

    Raises:
        ValueError: `split` is no plain split name (`cvbench.data.safe_paths.check_split_name`).
    """
    return f"coco_{check_split_name(split)}.record"


@dataclasses.dataclass(frozen=True)
class CocoObject:
    """One kept annotation.

    Attributes:
        category_id: the COCO category id.
        category_name: its name.
        box: normalized `[ymin, xmin, ymax, xmax]`, inside [0, 1].
        is_crowd: the annotation's `iscrowd`.
        area: the annotation's `area` (segmentation area, pixels).
    """

    category_id: int
    category_name: str
    box: tuple[float, float, float, float]
    is_crowd: bool
    area: float


@dataclasses.dataclass(frozen=True)
class CocoImage:
    """One image of the annotation file with its kept objects."""

    image_id: int
    file_name: str
    height: int
    width: int
    objects: tuple[CocoObject, ...]


def coco_example(image: CocoImage, encoded: bytes, image_format: str = "jpeg") -> bytes:
    """The serialized OD API `tf.train.Example` of one image (no TensorFlow needed).

    Args:
        image: the image and its kept objects.
        encoded: the image file's bytes.
        image_format: the value of `image/format`.
    """
    objs = image.objects
    return encode_example(
        {
            HEIGHT: int64_feature(image.height),
            WIDTH: int64_feature(image.width),
            FILENAME: bytes_feature(image.file_name),
            SOURCE_ID: bytes_feature(str(image.image_id)),
            KEY_SHA256: bytes_feature(hashlib.sha256(encoded).hexdigest()),
            ENCODED: bytes_feature(encoded),
            FORMAT: bytes_feature(image_format),
            BBOX_YMIN: float_feature([o.box[0] for o in objs]),
            BBOX_XMIN: float_feature([o.box[1] for o in objs]),
            BBOX_YMAX: float_feature([o.box[2] for o in objs]),
            BBOX_XMAX: float_feature([o.box[3] for o in objs]),
            CLASS_TEXT: bytes_feature([o.category_name for o in objs]),
            CLASS_LABEL: int64_feature([o.category_id for o in objs]),
            IS_CROWD: int64_feature([int(o.is_crowd) for o in objs]),
            AREA: float_feature([o.area for o in objs]),
        }
    )


def feature_spec() -> dict[str, Any]:
    """The parsing spec of the features the readers use (object lists variable-length)."""
    import tensorflow as tf

    return {
        ENCODED: tf.io.FixedLenFeature([], tf.string),
        HEIGHT: tf.io.FixedLenFeature([], tf.int64),
        WIDTH: tf.io.FixedLenFeature([], tf.int64),
        SOURCE_ID: tf.io.FixedLenFeature([], tf.string),
        FILENAME: tf.io.FixedLenFeature([], tf.string, default_value=""),
        BBOX_YMIN: tf.io.VarLenFeature(tf.float32),
        BBOX_XMIN: tf.io.VarLenFeature(tf.float32),
        BBOX_YMAX: tf.io.VarLenFeature(tf.float32),
        BBOX_XMAX: tf.io.VarLenFeature(tf.float32),
        CLASS_LABEL: tf.io.VarLenFeature(tf.int64),
        CLASS_TEXT: tf.io.VarLenFeature(tf.string),
        IS_CROWD: tf.io.VarLenFeature(tf.int64),
        AREA: tf.io.VarLenFeature(tf.float32),
    }


def _parse_dense(serialized: tf.Tensor, spec: dict[str, Any]) -> dict[str, tf.Tensor]:
    """`parse_single_example` with the variable-length features made dense."""
    import tensorflow as tf

    f = tf.io.parse_single_example(serialized, spec)
    return {k: tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v
            for k, v in f.items()}  # fmt: skip


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
        `image/source_id`), `height`/`width` (int64 scalars, as recorded), `filename`
        (string), `boxes` (float32 [N, 4], normalized `[ymin, xmin, ymax, xmax]`), `coco_ids`
        (int64 [N]), `is_crowd` (bool [N]), `area` (float32 [N], pixels).
    """
    import tensorflow as tf

    f = _parse_dense(serialized, feature_spec())
    boxes = stack_boxes(*(f[k] for k in BBOX_KEYS))  # lists of different lengths: NaN
    n = tf.shape(boxes)[0]
    coco_ids = f[CLASS_LABEL]
    if name_to_id is not None:
        by_name = name_to_id.lookup(f[CLASS_TEXT])
        coco_ids = tf.cond(tf.shape(coco_ids)[0] == n, lambda: coco_ids, lambda: by_name)
    return {
        "encoded": f[ENCODED],
        "image_id": tf.strings.to_number(f[SOURCE_ID], tf.int64),
        "height": f[HEIGHT],
        "width": f[WIDTH],
        "filename": f[FILENAME],
        "boxes": boxes,
        "coco_ids": _pad_like(coco_ids, n, -1),
        # Old records without is_crowd/area: treat every box as not crowd.
        "is_crowd": _pad_like(f[IS_CROWD], n, 0) > 0,
        "area": _pad_like(f[AREA], n, 0.0),
    }


def _pad_like(values: tf.Tensor, n: tf.Tensor, fill: Any) -> tf.Tensor:
    import tensorflow as tf

    return tf.cond(
        tf.shape(values)[0] == n,
        lambda: values,
        lambda: tf.fill([n], tf.constant(fill, values.dtype)),
    )


def category_name_table() -> tf.lookup.StaticHashTable:
    """A table from COCO 2017 category names (bytes) to their ids (int64), default -1."""
    import tensorflow as tf

    names, ids = zip(*((n, i) for i, n in COCO_2017_CATEGORIES), strict=True)
    init = tf.lookup.KeyValueTensorInitializer(
        tf.constant(names), tf.constant(ids, tf.int64), tf.string, tf.int64
    )
    return tf.lookup.StaticHashTable(init, default_value=-1)


def groundtruth_from_records(files: Sequence[str]) -> dict[str, Any]:
    """A COCO annotation dict rebuilt from COCO TFRecords (for evaluation without the JSON).

    Boxes come back in pixels (normalized coordinates times the recorded size), with the
    recorded `area` and `is_crowd`; categories are named from `image/object/class/text`.
    Annotations the builder skipped (degenerate boxes) are absent, so numbers can differ
    slightly from an evaluation on the original annotation file.

    Args:
        files: the TFRecord files of a split (`cvbench.data.read.coco.list_record_files`).

    Returns:
        `{"images", "annotations", "categories"}`.

    Raises:
        BadFileError: a record whose box coordinate lists differ in length, naming the file
            and the record (its ground truth cannot be rebuilt).
    """
    import tensorflow as tf

    spec = {k: v for k, v in feature_spec().items() if k != ENCODED}
    by_name = {name: i for i, name in COCO_2017_CATEGORIES}
    images, annotations, names = [], [], {}
    for path in files:
        records = tf.data.TFRecordDataset(path).map(lambda r: _parse_dense(r, spec))
        for index, ex in enumerate(records.as_numpy_iterator()):
            image_id, height, width = int(ex[SOURCE_ID]), int(ex[HEIGHT]), int(ex[WIDTH])
            name = ex[FILENAME].decode("utf-8")
            images.append({"id": image_id, "height": height, "width": width, "file_name": name})
            if box_lists_differ(ex[k] for k in BBOX_KEYS):
                raise BadFileError(
                    f"{path}: record {index}: {DAMAGED_BOXES}: its ground truth cannot be "
                    "rebuilt; put the annotation file (instances_val2017.json) beside the "
                    "records, or build the records again"
                )
            for ann in _record_annotations(ex, image_id, height, width, by_name, names):
                annotations.append({"id": len(annotations) + 1, **ann})
    categories = [{"id": i, "name": n} for i, n in sorted(names.items())]
    return {"images": images, "annotations": annotations, "categories": categories}


def _record_annotations(
    ex: dict[str, Any],
    image_id: int,
    height: int,
    width: int,
    by_name: dict[str, int],
    names: dict[int, str],
) -> list[dict[str, Any]]:
    """The COCO annotations (without `id`) of one parsed record; adds category names seen."""
    ymin, xmin, ymax, xmax = (ex[k].astype(np.float64) for k in BBOX_KEYS)
    xywh = np.stack(
        [xmin * width, ymin * height, (xmax - xmin) * width, (ymax - ymin) * height], axis=-1
    )  # COCO [x, y, w, h] pixels
    n = len(xywh)
    crowd = ex[IS_CROWD] if len(ex[IS_CROWD]) == n else np.zeros(n, np.int64)
    area = ex[AREA] if len(ex[AREA]) == n else xywh[:, 2] * xywh[:, 3]
    texts = ex[CLASS_TEXT] if len(ex[CLASS_TEXT]) == n else [b""] * n
    labels = ex[CLASS_LABEL]
    if len(labels) != n:  # NVIDIA's records: names only
        labels = [by_name.get(t.decode("utf-8"), -1) for t in texts]
    out = []
    for j in range(n):
        cat = int(labels[j])
        if cat < 0:
            continue
        names.setdefault(cat, texts[j].decode("utf-8") or str(cat))
        out.append(
            {
                "image_id": image_id,
                "category_id": cat,
                "bbox": [float(v) for v in xywh[j]],
                "area": float(area[j]),
                "iscrowd": int(crowd[j]),
            }
        )
    return out
