"""The demo's data: the shapes sets drawn once, then converted by the real TFRecord builders.

    <data_dir>/raw/classification/   folder-per-class JPEGs   (shapes_data)
    <data_dir>/raw/detection/        COCO JSON + JPEGs        (shapes_data)
    <data_dir>/imagenet/             train-*, validation-*    (cvbench build-imagenet)
    <data_dir>/coco/                 coco_train.record-*, coco_val.record-*, instances_val.json
                                                              (cvbench build-coco)

Everything is reused by a second run with the same settings: the raw sets carry their
generator arguments, the builders' manifests say which shards are complete. When the settings
change, the raw sets are redrawn and the records rebuilt over the old ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cvbench.demo.config import DemoConfig
from cvbench.demo.shapes import SHAPE_NAMES
from cvbench.demo.shapes_data import write_classification_set, write_detection_set

CLS_TRAIN_SHARDS, CLS_VAL_SHARDS = 8, 2
DET_TRAIN_SHARDS, DET_VAL_SHARDS = 8, 2


@dataclass(frozen=True)
class DemoData:
    """Where the demo's data sets live."""

    cls_raw: Path
    det_raw: Path
    cls_records: Path
    det_records: Path

    @classmethod
    def under(cls, data_dir: str | os.PathLike) -> DemoData:
        root = Path(data_dir)
        return cls(
            cls_raw=root / "raw" / "classification",
            det_raw=root / "raw" / "detection",
            cls_records=root / "imagenet",
            det_records=root / "coco",
        )

    @property
    def det_val_annotations(self) -> Path:
        """The COCO ground truth of the detection validation split."""
        return self.det_raw / "annotations" / "instances_val.json"

    @property
    def det_train_images(self) -> Path:
        return self.det_raw / "train"

    @property
    def det_val_images(self) -> Path:
        return self.det_raw / "val"


def prepare_data(
    data_dir: str | os.PathLike,
    config: DemoConfig,
    *,
    num_workers: int | None = None,
    progress: bool = True,
) -> DemoData:
    """Draws (or reuses) the shapes sets and builds (or reuses) their TFRecords.

    Args:
        data_dir: the demo's data folder.
        config: sizes and seed of the sets.
        num_workers: encoding processes of the builders (None: every core).
        progress: let the builders print what they found and a progress bar.

    Returns:
        The `DemoData` paths.
    """
    from cvbench.data.builders.coco_builder import build_coco_splits
    from cvbench.data.builders.imagenet_builder import build_imagenet

    paths = DemoData.under(data_dir)
    cls_set = write_classification_set(
        paths.cls_raw,
        image_size=config.cls_image_size,
        train_per_class=config.cls_train_per_class,
        val_per_class=config.cls_val_per_class,
        seed=config.seed,
    )
    det_set = write_detection_set(
        paths.det_raw,
        image_size=config.det_image_size,
        num_train=config.det_num_train,
        num_val=config.det_num_val,
        seed=config.seed + 1,
    )
    num_train = config.cls_train_per_class * len(SHAPE_NAMES)
    build_imagenet(
        paths.cls_raw,
        paths.cls_records,
        train_shards=min(CLS_TRAIN_SHARDS, num_train),
        val_shards=min(CLS_VAL_SHARDS, config.cls_val_per_class * len(SHAPE_NAMES)),
        num_workers=num_workers,
        seed=config.seed,
        overwrite=not cls_set.reused,  # our own records of an older set
        progress=progress,
    )
    build_coco_splits(
        paths.det_records,
        {
            "train": (
                paths.det_raw / "annotations" / "instances_train.json",
                paths.det_raw / "train",
            ),
            "val": (paths.det_val_annotations, paths.det_val_images),
        },
        num_shards={
            "train": min(DET_TRAIN_SHARDS, config.det_num_train),
            "val": min(DET_VAL_SHARDS, config.det_num_val),
        },
        num_workers=num_workers,
        seed=config.seed,
        overwrite=not det_set.reused,
        progress=progress,
    )
    return paths
