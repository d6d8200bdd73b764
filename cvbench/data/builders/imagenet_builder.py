"""`build_imagenet`: a raw ImageNet-style folder -> sharded TFRecords in the standard layout.

The output is what TensorFlow ImageNet loaders read: `train-00000-of-01024` ... and
`validation-00000-of-00128` ..., one `tf.train.Example` per image with the keys of
`cvbench.data.tfrecord.imagenet_example` (labels 1..N, 0 left for background), and beside
them `dataset_info.json` (`cvbench.data.dataset_info`: the classes in label order with their
texts and image counts, the label offset 1, the resize and quality used) and the DALI index
file of each shard, `idx/<shard>.idx` (`cvbench.data.dali_index`). The input
layout and label files are described in `cvbench.data.builders.imagenet_layout`; the writing rules
(parallel workers, atomic shards, resume, refusing to overwrite another data set) in
`cvbench.data.builders.sharded_writer`.

Usage (tests/data/builders/test_build_imagenet.py runs it on tiny folders):

    summary = build_imagenet("/data/raw", "/data/tfrecords", resize=256)
    print(summary.format())

The module is named `imagenet_builder`, not after its function, so that
`cvbench.data.build_imagenet` is always the function (a package attribute named like a
submodule is replaced by the submodule once that is imported).
"""

from __future__ import annotations

import functools
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cvbench.data.builders import imagenet_layout as layout
from cvbench.data.builders.manifest import check_data_set_file, drop_replaced_info, kept_info
from cvbench.data.builders.sharded_writer import (
    Skip,
    SplitSpec,
    WriteSummary,
    build_lock,
    check_out_dir,
    disk_full_as_error,
    write_sharded,
)
from cvbench.data.dali_index import (
    INDEX_DIR,
    IndexSummary,
    check_indexes_replaceable,
    index_folder,
    write_indexes,
)
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
    Resize,
    check_max_bytes,
    check_max_pixels,
    check_resize,
    read_image_file,
    to_rgb_jpeg,
)
from cvbench.data.safe_paths import is_inside
from cvbench.data.tfrecord import imagenet_example
from cvbench.utils.errors import printable

TRAIN_SPLIT = "train"
VALIDATION_SPLIT = "validation"
#: The longest side JPEG can encode: a fixed resize beyond it could never be written.
MAX_JPEG_SIDE = 65_535


def check_resize_target(resize: Resize | None, max_pixels: int | None) -> Resize | None:
    """Refuses, before any work, a fixed resize `(height, width)` whose images would be
    larger than the images the build reads may be (`max_pixels`, `--max-pixels`) or than
    JPEG can encode (`MAX_JPEG_SIDE`): every image would be decoded into that many pixels
    (`--resize 100000x100000` asked 30 GB an image of the out-of-memory killer). A shorter
    side `S` never upscales, so its images are never larger than the ones read.

    Raises:
        ValueError: naming the size and the limit (exit 2 in the command).

    Example:
        >>> check_resize_target((352, 352), 64_000_000)
        (352, 352)
        >>> check_resize_target((8001, 8000), 64_000_000)
        Traceback (most recent call last):
        ...
        ValueError: --resize 8001x8000 makes images of 64,008,000 pixels, over the limit of
        64,000,000 (--max-pixels); choose a smaller size
    """
    resize = check_resize(resize)
    if not isinstance(resize, tuple):
        return resize
    height, width = resize
    text = f"--resize {height}x{width}"
    if max(height, width) > MAX_JPEG_SIDE:
        raise ValueError(
            f"{text} has a side over {MAX_JPEG_SIDE:,} pixels, the most a JPEG can hold; "
            "choose a smaller size"
        )
    if max_pixels is not None and height * width > max_pixels:
        raise ValueError(
            f"{text} makes images of {height * width:,} pixels, over the limit of "
            f"{max_pixels:,} (--max-pixels); choose a smaller size"
        )
    return resize


@dataclass(frozen=True)
class ImageItem:
    """One image to encode (picklable: it travels to worker processes).

    Attributes:
        path: the file to read.
        relpath: `path` relative to the raw folder ('/'-separated), for the manifest.
        label: record label, 1..N.
        synset: class name.
        text: human-readable class text.
        boxes: normalized `(xmin, ymin, xmax, ymax)` boxes.
    """

    path: str
    relpath: str
    label: int
    synset: str
    text: str
    boxes: tuple[tuple[float, float, float, float], ...] = ()

    def key(self) -> str:
        """What identifies this item in the manifest."""
        return f"{self.relpath}\t{self.label}\t{self.synset}\t{self.text}\t{self.boxes}"


def encode_image_item(
    item: ImageItem,
    *,
    resize: Resize | None,
    quality: int,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    max_image_bytes: int | None = DEFAULT_MAX_IMAGE_BYTES,
) -> bytes | Skip:
    """Reads, checks and (if needed) re-encodes one image; returns the serialized record.

    Returns:
        The `tf.train.Example` bytes, or `Skip(reason)` for an unreadable file or image (one
        over `max_pixels`, a file over `max_image_bytes`, a FIFO or device included).
    """
    try:
        data = read_image_file(item.path, max_bytes=max_image_bytes)
        image = to_rgb_jpeg(data, resize=resize, quality=quality, max_pixels=max_pixels)
    except ImageError as e:
        return Skip(str(e))
    return imagenet_example(
        encoded=image.data,
        height=image.height,
        width=image.width,
        label=item.label,
        synset=_as_stored(item.synset),
        text=_as_stored(item.text),
        filename=_as_stored(os.path.basename(item.path)),
        boxes=item.boxes,
    )


def _as_stored(name: str) -> str | bytes:
    """`name` as a record stores it: the str when it is UTF-8, else its bytes as the file
    system gave them (Python decodes a name that is not UTF-8 into surrogates, which
    `str.encode` refuses)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape")
    return name


@dataclass
class BuildSummary:
    """The outcome of `build_imagenet`.

    Attributes:
        write: the writer's summary (per-split records, shards, bytes, skipped files, time).
        num_classes: number of classes (labels 1..num_classes).
        validation_layout: 'class folders', 'flat' or 'none'.
        validation_source: what was found for validation, in words.
        ignored_files: files left out because their extension is not an image's.
        train_counts: class -> training images found, in label order (0 for an empty class
            folder).
        warnings: what the build kept but should be looked at (empty class folders).
        index: the DALI index files written next to the shards (`idx/<shard>.idx`,
            `cvbench.data.dali_index`).
    """

    write: WriteSummary
    num_classes: int
    validation_layout: str
    validation_source: str
    ignored_files: int
    train_counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    index: IndexSummary | None = None

    def format(self) -> str:
        """A multi-line human-readable summary."""
        return "\n".join(
            [
                f"classes: {self.num_classes} (labels 1..{self.num_classes}, 0 = background)",
                *(f"warning: {printable(w)}" for w in self.warnings),
                f"validation: {self.validation_source}",
                f"non-image files ignored: {self.ignored_files}",
                self.write.format(unit="images"),
                *([self.index.format()] if self.index is not None else []),
            ]
        )


def empty_class_warning(folder: str, label: int) -> str:
    """The warning for a training class folder without images."""
    return (
        f"class folder {folder} holds no images; kept as class {Path(folder).name} "
        f"(label {label}) with 0 training images"
    )


def _items(
    pairs: list[tuple[str, str]],
    raw_dir: Path,
    label_of: dict[str, int],
    texts: dict[str, str],
    boxes: dict[str, list],
    rng: random.Random,
) -> list[ImageItem]:
    items = [
        ImageItem(
            path=path,
            relpath=Path(os.path.relpath(path, raw_dir)).as_posix(),
            label=label_of[cls],
            synset=cls,
            text=texts.get(cls, cls),
            boxes=tuple(tuple(b) for b in boxes.get(os.path.basename(path), ())),
        )
        for path, cls in pairs
    ]
    rng.shuffle(items)  # spread the classes over the shards
    return items


def _dataset_info(
    found: layout.RawImages, texts: dict[str, str], options: dict, summary: WriteSummary | None
) -> DatasetInfo:
    """The `dataset_info.json` of a build: classes in label order (label = index + 1); its
    classes only (no split records) when `summary` is None, before writing."""
    counts = {TRAIN_SPLIT: found.train_counts()}
    if found.validation:
        counts[VALIDATION_SPLIT] = found.validation_counts()
    classes = tuple(
        ClassInfo(
            id=cls,
            name=texts.get(cls),
            images={split: per_class[cls] for split, per_class in counts.items()},
        )
        for cls in found.classes
    )
    return DatasetInfo(
        kind="imagenet",
        classes=classes,
        label_offset=1,
        image_policy=options,
        splits={} if summary is None else {n: r.num_records for n, r in summary.splits.items()},
    )


def _check_kept_classes(kept: tuple[DatasetInfo, list[str]] | None, new: DatasetInfo) -> None:
    """Refuses, before any shard is written, a build whose classes differ from those of the
    splits the folder keeps (`kept_info`): their records carry labels of their class list,
    and one folder holds one (label = index + 1), with or without `overwrite`.

    Raises:
        ValueError: naming the kept splits and the first difference (exit 2 in the command).
    """
    if kept is None:
        return
    info, names = kept
    difference = class_difference(info, new, old_name=f"in split {', '.join(names)}")
    if difference is not None:
        raise ValueError(
            f"the classes of this build differ from those of split {', '.join(names)} kept in "
            f"the output folder: {difference}; every split of a folder needs the same classes "
            "(their records carry the labels): build every split again from one raw folder, "
            "or build into another output folder"
        )


def build_imagenet(
    raw_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    train_shards: int = 1024,
    val_shards: int = 128,
    resize: Resize | None = None,
    quality: int = 90,
    num_workers: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
    validation_labels: str | os.PathLike | None = None,
    class_texts: str | os.PathLike | None = None,
    boxes: str | os.PathLike | None = None,
    train_dir: str | os.PathLike | None = None,
    validation_dir: str | os.PathLike | None = None,
    strict: bool = False,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    progress: bool = True,
    max_image_bytes: int | None = DEFAULT_MAX_IMAGE_BYTES,
) -> BuildSummary:
    """Builds ImageNet-format TFRecords from a folder-per-class image set.

    Args:
        raw_dir: the raw folder (`train/<class>/...`, optional `validation/` or `val/`).
        out_dir: the output folder.
        train_shards: training shard files (at most the number of training images).
        val_shards: validation shard files (at most the number of validation images).
        resize: None (keep sizes), an int S (shorter side to S, aspect kept, never upscaled)
            or (height, width) (exactly that size, NVIDIA's fixed resize).
        quality: JPEG quality of re-encoded images (PNG, CMYK, grayscale or resized).
        num_workers: worker processes; None = all cores, <= 1 = this process only.
        seed: seed of the shuffle that spreads images over the shards.
        overwrite: replace a different data set already in `out_dir`.
        validation_labels: ground-truth label file for a flat validation folder (formats in
            `cvbench.data.builders.imagenet_layout`); found automatically under its usual names.
        class_texts: class -> human-readable text file; `imagenet_metadata.txt` or
            `LOC_synset_mapping.txt` in `raw_dir` are used when present. Default text: the
            class name.
        boxes: bounding-box CSV (`name,xmin,ymin,xmax,ymax`, normalized).
        train_dir: training folder if not `raw_dir/train`.
        validation_dir: validation folder if not `raw_dir/validation` or `raw_dir/val`.
        strict: refuse (before writing anything) a training class folder with no images,
            instead of keeping it as a class with 0 images and a warning.
        max_pixels: images with more pixels (width x height, read from the header before
            decoding) are skipped and listed like unreadable ones; None for no limit.
        progress: print what was found and a progress bar to stderr.
        max_image_bytes: image files larger than this (or not regular files: a FIFO, a
            device) are skipped and listed like unreadable ones; None for no limit.

    Returns:
        A `BuildSummary`.

    Raises:
        FileNotFoundError: missing folders or files (the message says what was looked for).
        FileExistsError: `out_dir` holds a different data set and `overwrite` is False.
        ValueError: bad arguments (an empty `out_dir`, a fixed `resize` over `max_pixels`
            (`check_resize_target`), an output folder inside the raw data, a `dataset_info.json`
            in `out_dir` that cvbench did not write: `check_data_set_file`), inconsistent
            label files, or (with `strict`) a class folder without images.
        BadFileError: a symbolic link to a folder that would make images be read twice (see
            `cvbench.data.builders.imagenet_layout`); a link or a file in place of `out_dir/idx`
            (`cvbench.data.dali_index.index_folder`), refused before any work.
    """
    out_dir = check_out_dir(out_dir)
    max_pixels = check_max_pixels(max_pixels)
    resize = check_resize_target(resize, max_pixels)
    max_image_bytes = check_max_bytes(max_image_bytes)
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    raw = Path(raw_dir)
    for folder, what in ((raw, "raw"), (train_dir, "training"), (validation_dir, "validation")):
        if folder is not None and is_inside(out_dir, folder):
            same = Path(out_dir).resolve() == Path(folder).resolve()
            raise ValueError(
                f"the output folder {out_dir} is {'' if same else 'inside '}the {what} folder "
                f"{folder}: what it "
                "writes would become raw data of the next build (a class folder, or images); "
                "choose an output folder outside it"
            )
    check_data_set_file(dataset_info_path(out_dir))
    index_folder(out_dir, create=False)  # a link in place of idx/ is refused before any work
    found = layout.discover(
        raw,
        train_dir=train_dir,
        validation_dir=validation_dir,
        validation_labels=validation_labels,
    )
    if class_texts is None:
        class_texts = layout.find_class_texts(raw)
    texts = layout.read_class_texts(class_texts) if class_texts is not None else {}
    box_table = layout.read_boxes(boxes) if boxes is not None else {}
    for split, images, shards, flag in (
        ("training", found.train, train_shards, "train_shards (--train-shards)"),
        ("validation", found.validation, val_shards, "val_shards (--val-shards)"),
    ):
        if images and not 1 <= shards <= len(images):
            raise ValueError(
                f"{len(images)} {split} images cannot fill {shards} shards; set {flag} to a "
                f"value in 1..{len(images)}"
            )
    label_of = {cls: i + 1 for i, cls in enumerate(found.classes)}
    if strict and found.empty_class_dirs:
        raise ValueError(
            f"{len(found.empty_class_dirs)} class folder(s) hold no images: "
            f"{', '.join(found.empty_class_dirs[:10])}; remove them or add images (without "
            "strict / --strict they are kept as classes with 0 images)"
        )
    warnings = [empty_class_warning(d, label_of[Path(d).name]) for d in found.empty_class_dirs]
    if progress:
        print(
            f"found {len(found.classes)} classes, {len(found.train):,} training images; "
            f"{found.validation_source}"
            + (f" ({len(found.validation):,} images)" if found.validation else ""),
            file=sys.stderr,
        )
        for w in warnings:
            print(f"warning: {printable(w)}", file=sys.stderr)

    rng = random.Random(seed)
    splits = [
        SplitSpec(
            TRAIN_SPLIT, _items(found.train, raw, label_of, texts, box_table, rng), train_shards
        )
    ]
    if found.validation:
        val_items = _items(found.validation, raw, label_of, texts, box_table, rng)
        splits.append(SplitSpec(VALIDATION_SPLIT, val_items, val_shards))
    shards = [Path(out_dir) / s.shard_name(i) for s in splits for i in range(s.num_shards)]
    if overwrite:  # every index is rewritten after the shards: a user's file refused now
        check_indexes_replaceable(shards)
    options = {"resize": list(resize) if isinstance(resize, tuple) else resize, "quality": quality}
    train_counts = found.train_counts()
    metadata = {
        "num_classes": len(found.classes),
        "train_images_per_class": train_counts,
        "validation_images_per_class": found.validation_counts(),
        "empty_classes": [Path(d).name for d in found.empty_class_dirs],
        "warnings": warnings,
    }
    # One build at a time in a folder: from reading what it keeps to the last file.
    with build_lock(out_dir):
        kept = kept_info(out_dir, {s.name for s in splits}, "imagenet")
        _check_kept_classes(kept, _dataset_info(found, texts, options, None))
        drop_replaced_info(out_dir, kept, overwrite)
        summary = write_sharded(
            out_dir,
            splits,
            functools.partial(
                encode_image_item,
                resize=resize,
                quality=quality,
                max_pixels=max_pixels,
                max_image_bytes=max_image_bytes,
            ),
            dataset="imagenet",
            options=options,
            metadata=metadata,
            item_key=ImageItem.key,
            describe=lambda item: item.relpath,
            num_workers=num_workers,
            overwrite=overwrite,
            progress=progress,
            unit="img",
        )
        with disk_full_as_error(dataset_info_path(out_dir), summary):
            write_dataset_info(out_dir, _dataset_info(found, texts, options, summary))
    with disk_full_as_error(Path(out_dir) / INDEX_DIR, summary):
        index = write_indexes(shards, overwrite=overwrite)
    return BuildSummary(
        summary,
        len(found.classes),
        found.validation_layout,
        found.validation_source,
        len(found.ignored),
        train_counts,
        warnings,
        index,
    )
