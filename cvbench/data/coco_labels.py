"""COCO category ids and the contiguous class indices of a detector (no TensorFlow).

`CocoLabelMap` maps class index `i` in `[0, num_classes)` to a COCO category id and back; the
COCO reader (`cvbench.data.read.coco`, which re-exports it), the record schema
(`cvbench.data.coco_schema`) and the detection task share it. `COCO_2017_CATEGORIES` lists
the 80 categories of COCO 2017 with their names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: The largest category id cvbench accepts. A detector's class index is by default the
#: category id - 1 (SSD320's 90 classes), so the largest id sets its width, and the label
#: map's `index_table` is as long as the largest id.
MAX_CATEGORY_ID = 10_000

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
        if not ids or min(ids) < 1 or max(ids) > MAX_CATEGORY_ID or len(set(ids)) != len(ids):
            shown = repr(self.category_ids) if len(ids) <= 20 else f"{len(ids)} ids"
            raise ValueError(
                f"category_ids must be unique integers in 1..{MAX_CATEGORY_ID} "
                f"(MAX_CATEGORY_ID), got {shown}"
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

    @classmethod
    def from_categories(cls, categories: Sequence[Mapping[str, Any]]) -> CocoLabelMap:
        """The categories of an annotation file (`[{"id": ..., ...}]`) in id order."""
        return cls(tuple(sorted(int(c["id"]) for c in categories)))

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
