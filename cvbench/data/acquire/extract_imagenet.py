"""Lay out the official ILSVRC2012 archives as `train/<synset>/*.JPEG` and `val/<synset>/*.JPEG`.

ImageNet needs an account at image-net.org, so cvbench cannot download it; users bring:

- `ILSVRC2012_img_train.tar` (138 GB): one tar per class, `n01440764.tar` ..., each holding that
  class's JPEGs (`n01440764_10026.JPEG`, ...).
- `ILSVRC2012_img_val.tar` (6.3 GB): 50,000 JPEGs, `ILSVRC2012_val_00000001.JPEG` ..., flat.
- `ILSVRC2012_devkit_t12.tar.gz` (2.5 MB): `data/ILSVRC2012_validation_ground_truth.txt` (one
  ILSVRC2012_ID, 1..1000, per validation image in order) and `data/meta.mat` (ILSVRC2012_ID ->
  WNID, read with scipy). Without scipy, a labels file naming the WNID of each validation image
  replaces the devkit (see `load_val_labels_file`). From the devkit the class texts are also
  written to `OUT/imagenet_metadata.txt`, where `build-imagenet` looks for them.

Both tars are read as streams (`tarfile` mode "r|"): each class tar is unpacked straight from
the outer stream, never written to disk, so the extraction needs the images' space once, not
twice. Reruns skip finished work: a class is extracted into a staging folder, renamed into
place, then marked done (`OUT/.cvbench-extract/`); a class without its marker is redone, and a
validation image is written under a temporary name and renamed, so one that exists is whole.

Every name read from the archives that becomes a path is checked first: a WNID (from
`meta.mat` or a labels file) must look like `n01440764`, a member name is reduced to its last
component, so nothing is ever written outside `OUT`. Two members that reduce to the same file
name (in one class tar, or in the validation tar) are refused with `BadFileError` naming the
archive and both members: the official tars hold each image once, so a duplicate means a
damaged or crafted archive; keeping the last would silently drop an image, and keeping both
would need invented names that no label or box file knows. A truncated or corrupt archive
stops the extraction with `BadFileError` naming it (what was finished before stays); so does
a full disk or another `OSError`, naming the file being written. The archives are opened
through `cvbench.utils.files.open_input` (a FIFO or a device is refused, never waited on).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cvbench.data.acquire.imagenet_labels import (
    WNID,
    load_val_labels_file,
    load_val_labels_from_devkit,
    reading_archive,
    write_class_texts,
)
from cvbench.data.safe_paths import make_dir, plain_name
from cvbench.utils.errors import BadFileError, naming
from cvbench.utils.files import check_regular, open_input, open_output, read_input
from cvbench.utils.io import atomic_open
from cvbench.utils.progress import progress_bar

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"

_STATE = ".cvbench-extract"
CLASS_TEXTS = "imagenet_metadata.txt"


@dataclass(frozen=True)
class ExtractStats:
    """What one extraction call did.

    Attributes:
        written: images written by this call.
        skipped: images (train: whole classes' images are not counted) already in place.
        classes_written: train classes extracted by this call.
        classes_skipped: train classes already marked done.
    """

    written: int = 0
    skipped: int = 0
    classes_written: int = 0
    classes_skipped: int = 0


class _ProgressReader:
    """A read-only file wrapper that advances a progress bar by the bytes read."""

    def __init__(self, f: IO[bytes], bar: Any) -> None:
        self._f = f
        self._bar = bar

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self._bar.update(len(data))
        return data


def _bytes_bar(path: Path, progress: bool, desc: str) -> Any:
    return progress_bar(
        total=path.stat().st_size,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=desc,
        disable=not progress,
    )


def _copy_to(source: IO[bytes], path: Path, chunk_size: int = 1 << 20) -> None:
    """Writes `source` to `path`, never through a symbolic link (`open_output`). An error
    while writing (a full disk) names `path`; one while reading (a truncated archive) is
    raised as it is."""
    with naming(path):
        f = open_output(path, "wb")  # noqa: SIM115 (close() is checked: it flushes, and can fail)
    try:
        while chunk := source.read(chunk_size):
            with naming(path):
                f.write(chunk)
    finally:
        with naming(path):
            f.close()


def _write_marker(path: Path, count: int) -> None:
    with naming(path), atomic_open(path, "w", encoding="ascii") as f:
        f.write(f"{count}\n")


def _member_file_name(archive: str | Path, member: tarfile.TarInfo) -> str:
    name = os.path.basename(member.name)
    if not plain_name(name):
        raise BadFileError(f"{archive}: unexpected archive member {member.name!r}")
    return name


def extract_train(
    train_tar: str | os.PathLike, out_dir: str | os.PathLike, *, progress: bool = True
) -> ExtractStats:
    """Extracts `ILSVRC2012_img_train.tar` into `out_dir/train/<synset>/`.

    Args:
        train_tar: the outer tar of per-class tars.
        out_dir: the ImageNet folder (gets `train/`).
        progress: show progress (bytes of the outer tar, MB/s, ETA): a tqdm bar on a
            terminal or in Jupyter, plain lines elsewhere.

    Returns:
        `ExtractStats` with `written`, `classes_written` and `classes_skipped` set.

    Raises:
        BadFileError: a member of the outer tar is not `<synset>.tar`, or the tar (or a
            class tar in it) is truncated or corrupt; the classes finished before stay.
    """
    train_tar, out_dir = Path(train_tar), Path(out_dir)
    markers = make_dir(out_dir / _STATE / "train")
    staging_root = make_dir(out_dir / _STATE / "staging")
    make_dir(out_dir / "train")
    written = classes_written = classes_skipped = 0
    class_tars: dict[str, str] = {}
    with (
        reading_archive(train_tar),
        open_input(train_tar, what="archive") as raw,
        _bytes_bar(train_tar, progress, "train classes") as bar,
        tarfile.open(fileobj=_ProgressReader(raw, bar), mode="r|") as outer,
    ):
        for member in outer:
            if not member.isfile():
                continue
            name = _member_file_name(train_tar, member)
            synset = name.removesuffix(".tar")
            if not name.endswith(".tar") or not WNID.fullmatch(synset):
                raise BadFileError(
                    f"{train_tar}: expected one <synset>.tar per class (like n01440764.tar), "
                    f"found {member.name!r}; is this ILSVRC2012_img_train.tar?"
                )
            _refuse_duplicate(class_tars, name, member, train_tar, what="class tar")
            marker = markers / f"{synset}.done"
            if marker.exists():
                classes_skipped += 1
                continue
            staging = staging_root / synset
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            try:
                with reading_archive(train_tar, f" (member {member.name})"):
                    count = _extract_class(
                        outer.extractfile(member), f"{train_tar} (member {member.name})", staging
                    )
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            final = out_dir / "train" / synset
            shutil.rmtree(final, ignore_errors=True)  # a partial one from an earlier run
            os.replace(staging, final)
            _write_marker(marker, count)
            written += count
            classes_written += 1
    return ExtractStats(
        written=written, classes_written=classes_written, classes_skipped=classes_skipped
    )


def _extract_class(class_tar: IO[bytes], source: str, staging: Path) -> int:
    """Writes the images of one class tar (`source` names it) into `staging`; returns how
    many.

    Raises:
        BadFileError: two members with the same file name (see the module doc).
    """
    count = 0
    names: dict[str, str] = {}
    with tarfile.open(fileobj=class_tar, mode="r|") as inner:
        for image in inner:
            if image.isfile():
                name = _member_file_name(source, image)
                _refuse_duplicate(names, name, image, source)
                _copy_to(inner.extractfile(image), staging / name)
                count += 1
    return count


def _refuse_duplicate(
    names: dict[str, str],
    name: str,
    member: tarfile.TarInfo,
    source: str | Path,
    what: str = "image",
) -> None:
    """Records that `member` becomes the file `name`; refuses a second member that would."""
    if name in names:
        raise BadFileError(
            f"{source}: members {names[name]!r} and {member.name!r} are both the {what} "
            f"{name!r}; an ImageNet archive holds each {what} once: download it again"
        )
    names[name] = member.name


def _val_stem(name: str) -> str:
    return name.rsplit(".", 1)[0]


def extract_val(
    val_tar: str | os.PathLike,
    out_dir: str | os.PathLike,
    labels: Mapping[str, str],
    *,
    progress: bool = True,
) -> ExtractStats:
    """Extracts `ILSVRC2012_img_val.tar` into `out_dir/val/<synset>/`, using `labels`.

    Args:
        val_tar: the flat tar of validation JPEGs.
        out_dir: the ImageNet folder (gets `val/`).
        labels: image name without extension -> WNID (`load_val_labels_from_devkit` or
            `load_val_labels_file`).
        progress: show progress (a bar on a terminal, plain lines elsewhere).

    Returns:
        `ExtractStats` with `written` and `skipped` set.

    Raises:
        ValueError: a label that is not a WNID (`n` and 8 digits).
        BadFileError: an image without a label, labels for images the tar does not hold, or
            a truncated or corrupt tar; the images written before stay.
    """
    val_tar, out_dir = Path(val_tar), Path(out_dir)
    bad = sorted({w for w in labels.values() if not WNID.fullmatch(str(w))})
    if bad:
        raise ValueError(f"labels must be WNIDs like n01440764, got {bad[:3]}")
    done = out_dir / _STATE / "val.done"
    if done.exists():
        try:
            return ExtractStats(skipped=int(read_input(done, limit=64, what="marker")))
        except (OSError, ValueError):  # BadFileError included
            pass  # an unreadable marker: check every image again
    staging = make_dir(out_dir / _STATE / "staging")
    written = skipped = 0
    seen = set()
    names: dict[str, str] = {}
    with (
        reading_archive(val_tar),
        open_input(val_tar, what="archive") as raw,
        _bytes_bar(val_tar, progress, "val images") as bar,
        tarfile.open(fileobj=_ProgressReader(raw, bar), mode="r|") as tar,
    ):
        for member in tar:
            if not member.isfile():
                continue
            name = _member_file_name(val_tar, member)
            _refuse_duplicate(names, name, member, val_tar)
            stem = _val_stem(name)
            if stem not in labels:
                raise BadFileError(f"{val_tar}: no label for {member.name!r}; wrong labels file?")
            seen.add(stem)
            final = out_dir / "val" / labels[stem] / name
            if final.exists():
                skipped += 1
                continue
            tmp = staging / name
            try:
                _copy_to(tar.extractfile(member), tmp)
            except BaseException:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise
            make_dir(final.parent)  # once the image is whole: no empty folder is left
            os.replace(tmp, final)
            written += 1
    if len(seen) != len(labels):
        raise BadFileError(
            f"labels name {len(labels)} validation images but {val_tar} holds {len(seen)}"
        )
    _write_marker(done, written + skipped)
    return ExtractStats(written=written, skipped=skipped)


def extract_imagenet(
    out_dir: str | os.PathLike,
    *,
    train_tar: str | os.PathLike | None = None,
    val_tar: str | os.PathLike | None = None,
    devkit: str | os.PathLike | None = None,
    val_labels: str | os.PathLike | None = None,
    progress: bool = True,
) -> dict[str, ExtractStats]:
    """Lays out the official archives for `build-imagenet`; rerunnable.

    Args:
        out_dir: destination; gets `train/<synset>/`, `val/<synset>/` and, from the devkit,
            `imagenet_metadata.txt` (`<synset>\t<words>` per class).
        train_tar: `ILSVRC2012_img_train.tar`, or None to skip the training set.
        val_tar: `ILSVRC2012_img_val.tar`, or None to skip the validation set.
        devkit: `ILSVRC2012_devkit_t12.tar.gz` (needs scipy), for the validation labels and
            the class texts.
        val_labels: a labels file (see `load_val_labels_file`), used instead of the devkit.
        progress: show progress bars.

    Returns:
        {"train": ExtractStats, "val": ExtractStats} for the splits given.

    Raises:
        ValueError: nothing to do, or validation without labels.
        BadFileError: a malformed, truncated or corrupt archive or labels file (named).
        FileNotFoundError: a named archive does not exist.
        OSError: the output cannot be written (named: a read-only folder, a full disk, a
            file where a folder should be); what was finished before stays.
    """
    if train_tar is None and val_tar is None:
        raise ValueError("give train_tar and/or val_tar")
    if val_tar is not None and devkit is None and val_labels is None:
        raise ValueError("the validation split needs devkit or val_labels for its labels")
    for path in (train_tar, val_tar, devkit, val_labels):
        if path is not None and not Path(path).exists():
            raise FileNotFoundError(f"no such file: {path}")
        if path is not None:
            check_regular(path, what="input")  # a folder, FIFO or device: BadFileError
    out_dir = make_dir(out_dir)
    if devkit is not None:
        write_class_texts(devkit, out_dir / CLASS_TEXTS)
    stats = {}
    if val_tar is not None:  # labels first: a bad devkit fails before hours of train extraction
        labels = (
            load_val_labels_file(val_labels)
            if val_labels is not None
            else load_val_labels_from_devkit(devkit)
        )
    try:
        if val_tar is not None:
            stats["val"] = extract_val(val_tar, out_dir, labels, progress=progress)
        if train_tar is not None:
            stats["train"] = extract_train(train_tar, out_dir, progress=progress)
    finally:  # also after an error: a partial class or image is redone by the next run
        shutil.rmtree(out_dir / _STATE / "staging", ignore_errors=True)
    return stats
