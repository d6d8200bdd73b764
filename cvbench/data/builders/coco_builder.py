"""`build_coco` / `build_coco_splits`: COCO annotations + images -> TFRecords (TF OD API format).

Input: a COCO annotation JSON (`instances_train2017.json`) and its image folder
(`train2017/`). Output: `coco_train.record-00000-of-00100` … (100 shards) or
`coco_val.record-00000-of-00010` … (10 shards), one `tf.train.Example` per image, in the
layout `cvbench.data.coco_schema` defines (and `coco_schema.coco_example` writes).

Annotations are checked before anything is written (`cvbench.data.builders.coco_annotations`): bad
boxes are skipped and counted, a malformed file is refused naming the entry. Images without
boxes are kept (COCOeval counts them) and counted.

Beside the records goes `dataset_info.json` (`cvbench.data.dataset_info`): the categories of
the annotation files in id order with their names (class index = rank of the id), the images
per category and split, the JPEG quality.

A folder is built split by split, in one call or call after call (a user's own train and val
files): each call writes the splits it names and keeps the folder's others, whose categories
the new ones must share (refused naming the first difference); `dataset_info.json` and the
manifest then describe every split, and `overwrite` replaces only the splits named.

The module is named `coco_builder`, not after its function `build_coco`, so that
`cvbench.data.build_coco` is always the function (a package attribute named like a submodule
is replaced by the submodule once that is imported).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import functools
import os
import random
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from cvbench.data.builders.coco_annotations import AnnotationReport, load_coco_annotations
from cvbench.data.builders.manifest import check_data_set_file, drop_replaced_info, kept_info
from cvbench.data.builders.sharded_writer import (
    DiskFullError,
    Skip,
    SplitSpec,
    WriteSummary,
    build_lock,
    disk_full_as_error,
    write_sharded,
)
from cvbench.data.coco_schema import SHARD_PATTERN, CocoImage, coco_example
from cvbench.data.dataset_info import (
    ClassInfo,
    DatasetInfo,
    class_difference,
    dataset_info_path,
    write_dataset_info,
)
from cvbench.data.image_io import (
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_PIXELS,
    ImageError,
    check_max_bytes,
    check_max_pixels,
    read_image_file,
    to_rgb_jpeg,
)
from cvbench.data.safe_paths import check_split_name, is_inside
from cvbench.utils.files import check_output, open_input, recording, written_by_cvbench
from cvbench.utils.io import atomic_path

#: Shard counts of the reference layout; other split names default to 10.
DEFAULT_SHARDS: dict[str, int] = {"train": 100, "val": 10}


@dataclasses.dataclass(frozen=True)
class CocoItem:
    """One image to encode (picklable: it travels to the worker processes).

    Attributes:
        path: the image file.
        image: its annotation entry and kept objects.
    """

    path: str
    image: CocoImage

    def key(self) -> str:
        """What identifies this item in the manifest: the image and its boxes, not the path."""
        return repr(self.image)

    def describe(self) -> str:
        """How a skipped item is named: `file_name (id N)`."""
        return f"{self.image.file_name} (id {self.image.image_id})"


def encode_coco_item(
    item: CocoItem,
    *,
    quality: int,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    max_image_bytes: int | None = DEFAULT_MAX_IMAGE_BYTES,
) -> bytes | Skip:
    """Reads and checks one image; returns its serialized record or `Skip(reason)`.

    RGB and grayscale JPEGs are stored byte for byte (TensorFlow's JPEG decoder expands
    grayscale to RGB); anything else (PNG behind a .jpg name, CMYK) is re-encoded as an RGB
    JPEG at `quality`. Every image is fully decoded once, so a corrupt file is skipped here
    and never reaches tf.data; so is one over `max_pixels` (width x height, from its header),
    and a file over `max_image_bytes` or not a regular file (a FIFO, a device).
    """
    try:
        data = read_image_file(item.path, max_bytes=max_image_bytes)
        decoded = to_rgb_jpeg(data, quality=quality, max_pixels=max_pixels)
    except ImageError as e:
        return Skip(str(e))
    ann = item.image
    if (decoded.height, decoded.width) != (ann.height, ann.width):
        return Skip(
            f"image is {decoded.height}x{decoded.width} pixels but the annotation file says "
            f"{ann.height}x{ann.width} (wrong image folder?)"
        )
    keep_original = decoded.source_format == "JPEG" and decoded.source_mode == "L"
    return coco_example(ann, data if keep_original else decoded.data)


@dataclasses.dataclass
class BuildSummary:
    """The outcome of `build_coco` / `build_coco_splits`.

    Attributes:
        write: the writer's summary (records, shards, bytes, skipped images, time).
        annotations: split -> what parsing its annotation file kept and skipped.
    """

    write: WriteSummary
    annotations: dict[str, AnnotationReport]

    def format(self) -> str:
        """A multi-line human-readable summary."""
        lines = []
        for split, report in self.annotations.items():
            lines.append(f"{split}: {report.summary()}")
        lines.append(self.write.format(unit="images"))
        return "\n".join(lines)


def build_coco_splits(
    output_dir: str | os.PathLike,
    sources: Mapping[str, tuple[str | os.PathLike, str | os.PathLike]],
    *,
    num_shards: Mapping[str, int] | None = None,
    num_workers: int | None = None,
    seed: int = 0,
    quality: int = 95,
    overwrite: bool = False,
    progress: bool = True,
    copy_annotations: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    max_image_bytes: int | None = DEFAULT_MAX_IMAGE_BYTES,
) -> BuildSummary:
    """Builds the TFRecords of the splits `sources` names into `output_dir`, keeping its others.

    The folder may already hold other splits (an earlier call for "train", this one for
    "val"): they are kept as they are, and `dataset_info.json` and the manifest describe them
    with the new ones. Every split of a folder has the same categories and settings (quality,
    seed). A split the folder holds already is resumed (only missing shards are written) when
    its images, boxes and shard count are the same, else refused unless `overwrite`.

    Args:
        output_dir: the output folder.
        sources: split name -> (annotation JSON, image folder), e.g.
            `{"val": ("annotations/instances_val2017.json", "val2017")}`. Records are named
            `coco_<split>.record-NNNNN-of-NNNNN`.
        num_shards: split -> shard count; default `DEFAULT_SHARDS` (train 100, val 10, others
            10), lowered to the number of images for tiny sets.
        num_workers: encoding processes; None = all cores, <= 1 = this process.
        seed: seed of the shuffle that spreads the training images over its shards (other
            splits keep the annotation file's order).
        quality: JPEG quality for the few images that must be re-encoded.
        overwrite: replace the splits named here when `output_dir` holds other versions of
            them (their shards the manifest lists, nothing else); the folder's other splits
            are never touched.
        progress: print the annotation reports and a progress bar to stderr.
        copy_annotations: copy the annotation file of every split but "train" next to the
            records as `instances_<split>.json`, where the evaluation finds its ground truth
            (the training file is large and never needed there). Such a file replaces only
            one cvbench wrote there (listed in the folder's `.cvbench-outputs.json`, unchanged
            since), with or without `overwrite`: a user's own file of that name is refused
            before anything is written.
        max_pixels: images with more pixels (width x height, from the header, before
            decoding) are skipped and listed like unreadable ones; None for no limit.
        max_image_bytes: image files larger than this (or not regular files: a FIFO, a
            device) are skipped and listed like unreadable ones; None for no limit.

    Returns:
        A `BuildSummary`.

    Raises:
        FileNotFoundError: a missing annotation file or image folder.
        FileExistsError: `output_dir` holds other versions of the named splits and
            `overwrite` is False; other splits built with other settings; or files named
            like shards that no manifest lists (never deleted).
        ValueError: bad arguments (an output folder inside an image folder), an annotation
            file that is not COCO or has no images, categories that differ between the
            splits (those named and those kept in `output_dir`), or an
            `instances_<split>.json` or `dataset_info.json` in `output_dir` that cvbench did
            not write (`check_data_set_file`).
    """
    if not sources:
        raise ValueError("sources must name at least one split")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    max_pixels = check_max_pixels(max_pixels)
    max_image_bytes = check_max_bytes(max_image_bytes)
    for split, (_, image_dir) in sources.items():
        check_split_name(split)  # before any path is made of it
        if is_inside(output_dir, image_dir):
            same = Path(output_dir).resolve() == Path(image_dir).resolve()
            raise ValueError(
                f"the output folder {output_dir} is {'' if same else 'inside '}the image folder "
                f"{image_dir} of split {split!r}: the records would be written among the "
                "images; choose an output folder outside it"
            )
    copies = _annotation_copies(output_dir, sources) if copy_annotations else []
    check_data_set_file(dataset_info_path(output_dir))
    specs, reports = [], {}
    for split, (annotations_file, image_dir) in sources.items():
        image_root = Path(image_dir)
        if not image_root.is_dir():
            raise FileNotFoundError(f"image folder {image_root} (split {split!r}) does not exist")
        images, report = load_coco_annotations(annotations_file)
        if not images:
            raise ValueError(f"{annotations_file} lists no images")
        reports[split] = report
        if progress:
            print(f"{split}: {report.summary()}", file=sys.stderr)
        items = [CocoItem(str(image_root / im.file_name), im) for im in images]
        if split == "train":
            random.Random(seed).shuffle(items)
        wanted = (num_shards or {}).get(split)
        count = wanted if wanted is not None else min(DEFAULT_SHARDS.get(split, 10), len(items))
        specs.append(SplitSpec(split, items, count, SHARD_PATTERN))
    # One build at a time in a folder: from reading what it keeps to the last file.
    with build_lock(output_dir):
        kept = kept_info(output_dir, set(sources), "coco")
        categories = _agreed_categories(output_dir, sources, reports, kept)
        drop_replaced_info(output_dir, kept, overwrite)
        summary = write_sharded(
            output_dir,
            specs,
            functools.partial(
                encode_coco_item,
                quality=quality,
                max_pixels=max_pixels,
                max_image_bytes=max_image_bytes,
            ),
            dataset="coco-tfod",
            options={"quality": quality, "seed": seed},
            item_key=CocoItem.key,
            describe=CocoItem.describe,
            num_workers=num_workers,
            overwrite=overwrite,
            progress=progress,
            unit="img",
        )
        for annotations_file, target in copies:
            try:
                with (
                    recording(target),
                    open_input(annotations_file, what="annotations file") as src,
                    atomic_path(target) as tmp,
                    open(tmp, "wb") as dst,
                ):
                    shutil.copyfileobj(src, dst)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                shards = sum(r.num_shards for r in summary.splits.values())
                raise DiskFullError(target, shards) from e
        info = _dataset_info(specs, categories, quality, summary)
        if info is not None:
            with disk_full_as_error(dataset_info_path(output_dir), summary):
                write_dataset_info(output_dir, info)
    return BuildSummary(summary, reports)


def _annotation_copies(
    output_dir: str | os.PathLike,
    sources: Mapping[str, tuple[str | os.PathLike, str | os.PathLike]],
) -> list[tuple[str | os.PathLike, Path]]:
    """(annotation file, `output_dir/instances_<split>.json`) for each split but "train",
    checked before any work: an existing target is replaced only when cvbench wrote it
    (`written_by_cvbench`; a rerun, or a rebuild with `overwrite`), never a user's file;
    the annotation file itself already in place is left as it is.

    Raises:
        ValueError: a target cvbench did not write, or a symbolic link (exit 2).
    """
    copies = []
    for split, (annotations_file, _) in sources.items():
        if split == "train":
            continue
        target = Path(output_dir) / f"instances_{split}.json"
        with contextlib.suppress(OSError):
            if os.path.samefile(target, annotations_file):
                continue  # the ground truth is already where the evaluation looks
        check_output(target, overwrite=True, is_ours=written_by_cvbench)
        copies.append((annotations_file, target))
    return copies


def _categories_info(categories: Mapping[int, str]) -> DatasetInfo:
    return DatasetInfo(
        kind="coco", classes=tuple(ClassInfo(i, categories[i]) for i in sorted(categories))
    )


def _agreed_categories(
    output_dir: str | os.PathLike,
    sources: Mapping[str, tuple[str | os.PathLike, str | os.PathLike]],
    reports: Mapping[str, AnnotationReport],
    kept: tuple[DatasetInfo, list[str]] | None,
) -> dict[int, str]:
    """The categories (id -> name) every split of the folder shares: those of the named
    splits' annotation files, which must agree with each other and with the splits the
    folder keeps (`kept`, its `dataset_info.json`); a file that lists no category (test
    images) agrees with any. The class index of a record is the rank of its category id, so
    splits with other categories would train and evaluate other classes under one index.

    Raises:
        ValueError: naming the two splits and the first difference (exit 2 in the command).
    """
    agreed: dict[int, str] = {}
    other, where = "", ""  # the split(s) `agreed` comes from, and where they are
    if kept is not None:
        info, names = kept
        agreed = {int(c.id): c.display_name for c in info.classes}
        other, where = ", ".join(names), f" already in {os.fspath(output_dir)}"
    for split, report in reports.items():
        if not report.categories:
            continue
        if not agreed:
            agreed, other = dict(report.categories), split
            continue
        difference = class_difference(
            _categories_info(agreed),
            _categories_info(report.categories),
            old_name=f"in split {other}",
            new_name=f"in split {split}",
        )
        if difference is not None:
            raise ValueError(
                f"{os.fspath(sources[split][0])}: its categories differ from those of split "
                f"{other}{where}: {difference}; every split of a folder needs the same "
                "categories (a class index is the rank of its category id): fix the file, or "
                "build it into another output folder"
            )
    return agreed


def _dataset_info(
    specs: list[SplitSpec],
    categories: Mapping[int, str],
    quality: int,
    summary: WriteSummary,
) -> DatasetInfo | None:
    """The `dataset_info.json` of the named splits: the folder's categories in id order,
    with the images holding a kept box of each; None when no file lists a category (test
    images). `write_dataset_info` adds the splits the folder keeps."""
    if not categories:
        return None
    images: dict[int, dict[str, int]] = {cat_id: {} for cat_id in categories}
    for spec in specs:
        per_class = collections.Counter(
            cat for item in spec.items for cat in {o.category_id for o in item.image.objects}
        )
        for cat_id in categories:
            images[cat_id][spec.name] = per_class[cat_id]
    return DatasetInfo(
        kind="coco",
        classes=tuple(
            ClassInfo(cat_id, categories[cat_id], images[cat_id]) for cat_id in sorted(categories)
        ),
        label_offset=None,
        image_policy={"resize": None, "quality": quality},
        splits={name: r.num_records for name, r in summary.splits.items()},
    )


def build_coco(
    annotations_file: str | os.PathLike,
    image_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    split: str,
    num_shards: int | None = None,
    num_workers: int | None = None,
    seed: int = 0,
    quality: int = 95,
    overwrite: bool = False,
    progress: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    max_image_bytes: int | None = DEFAULT_MAX_IMAGE_BYTES,
) -> BuildSummary:
    """Builds `coco_<split>.record-NNNNN-of-NNNNN` from one annotation file and image folder.

    Usage (tests/data/builders/test_build_coco.py runs it on tiny files):

        build_coco("annotations/instances_val2017.json", "val2017", "tfrecords", split="val")

    Args:
        annotations_file: COCO annotation JSON (`instances_val2017.json`).
        image_dir: the folder its `file_name`s are relative to (`val2017/`).
        output_dir: the output folder.
        split: the split name ("train" gives 100 shards, "val" 10 by default).
        num_shards: shard count instead of the default.
        num_workers, seed, quality, overwrite, progress, max_pixels, max_image_bytes: as in
            `build_coco_splits`.

    The annotation file of a split other than "train" is copied next to the records
    (`instances_<split>.json`) for the evaluation.

    Returns:
        A `BuildSummary`.

    Train and val go into one folder in two calls (`split="train"`, then `split="val"`):
    the second keeps the first's records and adds its own (`build_coco_splits`).

    Raises:
        As `build_coco_splits`.
    """
    return build_coco_splits(
        output_dir,
        {split: (annotations_file, image_dir)},
        num_shards=None if num_shards is None else {split: num_shards},
        num_workers=num_workers,
        seed=seed,
        quality=quality,
        overwrite=overwrite,
        progress=progress,
        max_pixels=max_pixels,
        max_image_bytes=max_image_bytes,
    )
