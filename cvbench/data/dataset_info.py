"""`dataset_info.json`: what a model trained on a folder of records needs to know about it.

Both builders (`build_imagenet`, `build_coco_splits`) write this small file beside the
records; `read_dataset_info(data_dir)` reads it back as a `DatasetInfo`. It holds the classes
in model-index order (class `i` of the model is `classes[i]`), with their id, human-readable
name and images per split, how record labels map to model indices, and the image policy the
builder used. The tasks take `num_classes` and `class_names` from it, so that training on a
6-class folder builds a 6-way head without `--num-classes`.

The file (format 1), written with sorted keys:

    {
      "format": 1,
      "kind": "imagenet",                 # or "coco"
      "label_offset": 1,                  # ImageNet: record label = index + 1; COCO: null
      "image_policy": {"resize": 256, "quality": 90},
      "splits": {"train": 1200, "validation": 60},    # records written per split
      "classes": [
        {"id": "n01440764", "name": "tench, Tinca tinca",
         "images": {"train": 200, "validation": 10}},
        ...
      ]
    }

Record labels: ImageNet-format records store labels 1..N (0 is left for background) and the
reader subtracts 1 (`label_offset` 1: index = record label - 1). COCO records store category
ids (1..90 with gaps for COCO 2017); the classes are the categories in id order, so index `i`
is the i-th smallest id (`label_offset` None; `DatasetInfo.category_ids`, the same order as
`CocoLabelMap.from_categories`). `images` counts the images found per class (COCO: images
holding at least one kept box of the class); images the builder then skipped as unreadable
are still counted there, not in `splits`.

Example:
    >>> info = DatasetInfo(kind="imagenet", label_offset=1, classes=(
    ...     ClassInfo(id="cat", name="domestic cat", images={"train": 3}),
    ...     ClassInfo(id="dog", images={"train": 2})))
    >>> info.num_classes, info.class_names
    (2, ('domestic cat', 'dog'))
    >>> DatasetInfo.from_json(info.to_json()) == info
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cvbench.data.coco_labels import MAX_CATEGORY_ID
from cvbench.utils.errors import BadFileError, check_utf8
from cvbench.utils.files import read_json
from cvbench.utils.io import write_json_atomic

DATASET_INFO_NAME = "dataset_info.json"
KINDS = ("imagenet", "coco")
_FORMAT = 1
#: The largest metadata file read (ImageNet-21k's 21,841 classes take about 3 MB).
MAX_DATASET_INFO_BYTES = 64 << 20


@dataclass(frozen=True)
class ClassInfo:
    """One class of a data set.

    Attributes:
        id: what the raw data calls it: the ImageNet synset / class folder name (str), or the
            COCO category id (int).
        name: human-readable name where the raw data gives one (ImageNet: the class text
            file; COCO: the category name), else None.
        images: split -> images of the class found by the builder.
    """

    id: str | int
    name: str | None = None
    images: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the model's class names: refused here, at the build or the read, not at the export
        if isinstance(self.id, str):
            check_utf8(self.id, what="class")
        if isinstance(self.name, str):
            check_utf8(self.name, what="class name")

    @property
    def display_name(self) -> str:
        """`name`, or the id as a string where there is no name."""
        return self.name if self.name is not None else str(self.id)


@dataclass(frozen=True)
class DatasetInfo:
    """What the builders know about a data set (see the module docstring).

    Attributes:
        kind: "imagenet" (ImageNet-format classification records) or "coco".
        classes: the classes in model-index order.
        label_offset: record label - model index (ImageNet: 1); None where labels are COCO
            category ids, mapped to indices by their rank (`category_ids`).
        image_policy: how the builder wrote the images (ImageNet: `resize`, `quality`; COCO:
            `quality` of re-encoded images).
        splits: split -> records written.
    """

    kind: str
    classes: tuple[ClassInfo, ...]
    label_offset: int | None = None
    image_policy: Mapping[str, Any] = field(default_factory=dict)
    splits: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        object.__setattr__(self, "classes", tuple(self.classes))
        if not self.classes:
            raise ValueError("a data set needs at least one class, got none")
        ids = [c.id for c in self.classes]
        if len(set(ids)) != len(ids):
            raise ValueError(f"class ids must be unique, got {ids!r}")
        if self.kind == "coco" and (not all(_category_id(i) for i in ids) or ids != sorted(ids)):
            shown = repr(ids) if len(ids) <= 20 else f"{len(ids)} ids, e.g. {ids[-3:]!r}"
            raise ValueError(
                f"COCO classes must have int category ids in 1..{MAX_CATEGORY_ID} in increasing "
                f"order, got {shown}"
            )

    @property
    def num_classes(self) -> int:
        """The number of classes: the width of a classifier (or detector) for the data."""
        return len(self.classes)

    @property
    def class_names(self) -> tuple[str, ...]:
        """The name of each model index 0..num_classes-1 (the id where there is no name)."""
        return tuple(c.display_name for c in self.classes)

    @property
    def category_ids(self) -> tuple[int, ...]:
        """COCO: the category id of each model index. ImageNet: ValueError."""
        if self.kind != "coco":
            raise ValueError(f"category_ids are COCO's; this data set is {self.kind!r}")
        return tuple(int(c.id) for c in self.classes)

    def to_json(self) -> dict[str, Any]:
        """The JSON document of the file (see the module docstring)."""
        return {
            "format": _FORMAT,
            "kind": self.kind,
            "label_offset": self.label_offset,
            "image_policy": dict(self.image_policy),
            "splits": dict(self.splits),
            "classes": [
                {"id": c.id, "name": c.name, "images": dict(c.images)} for c in self.classes
            ],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DatasetInfo:
        """The inverse of `to_json`.

        Raises:
            ValueError: a document of another format or with missing or malformed fields.
        """
        if not isinstance(doc, Mapping):
            raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
        if doc.get("format") != _FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r} (this cvbench reads {_FORMAT})")
        try:
            classes = tuple(
                ClassInfo(
                    id=c["id"],
                    name=c.get("name"),
                    images={str(k): int(v) for k, v in c.get("images", {}).items()},
                )
                for c in doc["classes"]
            )
            offset = doc.get("label_offset")
            return cls(
                kind=doc["kind"],
                classes=classes,
                label_offset=None if offset is None else int(offset),
                image_policy=dict(doc.get("image_policy", {})),
                splits={str(k): int(v) for k, v in doc.get("splits", {}).items()},
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed field: {e!r}") from None


def _category_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_CATEGORY_ID


def class_difference(
    old: DatasetInfo, new: DatasetInfo, *, old_name: str = "there", new_name: str = "here"
) -> str | None:
    """The first difference between what two descriptions say the classes (and so the
    record labels) are, in words, or None when they agree: the kind, label offset, class ids
    in order and their names. (Images per class and split, and records per split, are facts
    about splits and may differ.)

    Example:
        >>> a = DatasetInfo(kind="coco", classes=(ClassInfo(1, "cat"), ClassInfo(3, "dog")))
        >>> b = DatasetInfo(kind="coco", classes=(ClassInfo(1, "cat"), ClassInfo(3, "wolf")))
        >>> class_difference(a, b)
        "category 3 is named 'dog' there, 'wolf' here"
        >>> class_difference(a, DatasetInfo(kind="coco", classes=(ClassInfo(1, "cat"),)))
        "2 categories there, 1 here: category 3 ('dog') is there but not here"
    """
    a, b = old_name, new_name
    if old.kind != new.kind:
        return f"the kind is {old.kind!r} {a}, {new.kind!r} {b}"
    if old.label_offset != new.label_offset:
        return f"the label offset is {old.label_offset} {a}, {new.label_offset} {b}"
    one, many = ("category", "categories") if new.kind == "coco" else ("class", "classes")
    old_names = {c.id: c.name for c in old.classes}
    new_names = {c.id: c.name for c in new.classes}
    if set(old_names) != set(new_names):
        count = f"{len(old_names)} {many} {a}, {len(new_names)} {b}"
        only_old = [c for c in old.classes if c.id not in new_names]
        only_new = [c for c in new.classes if c.id not in old_names]
        if only_old:
            c = only_old[0]
            return f"{count}: {one} {c.id} ({c.display_name!r}) is {a} but not {b}"
        c = only_new[0]
        return f"{count}: {one} {c.id} ({c.display_name!r}) is {b} but not {a}"
    for o, n in zip(old.classes, new.classes, strict=True):
        if o.id != n.id:
            return f"the {one} order differs: {one} {o.id!r} {a}, {n.id!r} {b}"
        if o.name != n.name:
            return f"{one} {o.id} is named {o.name!r} {a}, {n.name!r} {b}"
    return None


def merge_splits(kept: DatasetInfo, new: DatasetInfo) -> DatasetInfo:
    """`new`, with the splits of `kept` it does not name added back (their records and
    images per class): the description of a folder built split by split, call after call.

    Raises:
        ValueError: the two describe other classes (`class_difference`) or another image
            policy, naming the difference.

    Example:
        >>> train = DatasetInfo(kind="coco", classes=(ClassInfo(1, "cat", {"train": 5}),),
        ...                     splits={"train": 5})
        >>> val = DatasetInfo(kind="coco", classes=(ClassInfo(1, "cat", {"val": 2}),),
        ...                   splits={"val": 2})
        >>> both = merge_splits(train, val)
        >>> dict(both.splits), dict(both.classes[0].images)
        ({'train': 5, 'val': 2}, {'train': 5, 'val': 2})
    """
    difference = class_difference(kept, new)
    if difference is None and dict(kept.image_policy) != dict(new.image_policy):
        difference = (
            f"the image policy is {dict(kept.image_policy)} there, {dict(new.image_policy)} here"
        )
    if difference is not None:
        raise ValueError(difference)
    named = set(new.splits) | {s for c in new.classes for s in c.images}
    classes = tuple(
        ClassInfo(
            n.id,
            n.name,
            {**{s: v for s, v in o.images.items() if s not in named}, **n.images},
        )
        for o, n in zip(kept.classes, new.classes, strict=True)
    )
    splits = {**{s: v for s, v in kept.splits.items() if s not in named}, **new.splits}
    return DatasetInfo(
        kind=new.kind,
        classes=classes,
        label_offset=new.label_offset,
        image_policy=dict(new.image_policy),
        splits=dict(sorted(splits.items())),
    )


def only_splits(info: DatasetInfo, names: Iterable[str]) -> DatasetInfo:
    """`info` describing only the splits `names` (their records and images per class).

    Example:
        >>> both = DatasetInfo(kind="coco", classes=(ClassInfo(1, "cat", {"train": 5, "val": 2}),),
        ...                    splits={"train": 5, "val": 2})
        >>> val = only_splits(both, ["val"])
        >>> dict(val.splits), dict(val.classes[0].images)
        ({'val': 2}, {'val': 2})
    """
    keep = set(names)
    return dataclasses.replace(
        info,
        classes=tuple(
            dataclasses.replace(c, images={s: n for s, n in c.images.items() if s in keep})
            for c in info.classes
        ),
        splits={s: n for s, n in info.splits.items() if s in keep},
    )


def write_dataset_info(data_dir: str | os.PathLike, info: DatasetInfo) -> Path:
    """Writes `info` to `data_dir/dataset_info.json` atomically (the mode of a new file).

    The file describes every split of its folder: the splits an existing, valid file there
    describes and `info` does not name are kept (`merge_splits`) when both describe the
    same classes and image policy, so that a folder built split by split, call after call,
    is described whole. Otherwise (another data set, or no readable file) `info` replaces
    it. The builders check the classes of the splits they keep before writing any shard.

    Returns:
        The file's path.
    """
    path = Path(data_dir) / DATASET_INFO_NAME
    try:
        existing = read_dataset_info(data_dir)
    except BadFileError:
        existing = None
    if existing is not None:
        with contextlib.suppress(ValueError):
            info = merge_splits(existing, info)
    write_json_atomic(path, info.to_json())
    return path


def dataset_info_path(data_dir: str | os.PathLike) -> Path:
    """Where the metadata file of `data_dir` is (whether or not it exists)."""
    return Path(data_dir) / DATASET_INFO_NAME


def read_dataset_info(data_dir: str | os.PathLike) -> DatasetInfo | None:
    """The `DatasetInfo` of the records in `data_dir`, or None if it has no metadata file
    (records written by another tool or an older cvbench).

    Raises:
        BadFileError: naming the file, when it cannot be read or is not a valid metadata file
            (a COCO category id above `MAX_CATEGORY_ID` included): not a regular file, over
            `MAX_DATASET_INFO_BYTES`, nested too deep, not JSON.
    """
    path = dataset_info_path(data_dir)
    try:
        data = read_json(path, limit=MAX_DATASET_INFO_BYTES, what="dataset metadata file")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise BadFileError(f"cannot read the dataset metadata file {path}: {e}") from None
    try:
        return DatasetInfo.from_json(data)
    except ValueError as e:
        raise BadFileError(f"{path} is not a valid dataset metadata file: {e}") from None
