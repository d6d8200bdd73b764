"""Finds the images and labels of a raw ImageNet-style folder: what `build_imagenet` reads.

Layout::

    raw_dir/
        train/<class>/<image>          one folder per class (ImageNet: synset ids like n01440764)
        validation/ or val/            optional, either
            <class>/<image>            split into class folders, or
            <image>                    flat, with a ground-truth label file

Classes are the training folder names, sorted; class i (0-based) gets record label i + 1.
Any folder-per-class image set works, with any class names. A class folder without images is
still a class (it keeps its label, so the others keep theirs); `discover` lists such folders in
`RawImages.empty_class_dirs` for the builder to warn about (or refuse, `strict=True`).

A flat validation folder needs a label file (given, or found under one of its usual names in
`raw_dir` or the validation folder). Three formats are recognised by content:

* the ILSVRC2012 devkit's `ILSVRC2012_validation_ground_truth.txt`: one ILSVRC2012_ID (1..1000)
  per line, for the images in file-name order; the devkit's `meta.mat` (beside it) maps the
  ids to synsets (read with scipy);
* one class name per line, for the images in file-name order (TensorFlow's
  `imagenet_2012_validation_synset_labels.txt`);
* `<file name> <class> ...` per line, separated by spaces or a comma, with an optional header
  (Kaggle's `LOC_val_solution.csv`); the file name may omit its extension. A line without
  a class, or an image given two different classes, is a `BadFileError` naming the line(s).

Optional extra files: class texts (`<class><tab or space><text>` per line; ImageNet's
`imagenet_metadata.txt` or Kaggle's `LOC_synset_mapping.txt`) and bounding boxes
(`<file name>,<xmin>,<ymin>,<xmax>,<ymax>` per line, normalized: the output of TensorFlow's
`process_bounding_boxes.py`, `imagenet_2012_bounding_boxes.csv`); a line that is not that, a
`nan` or `inf` coordinate included, is a `BadFileError` naming the line.

Each of these files is read through `cvbench.utils.files.read_input`: a regular file (a FIFO
or a link to `/dev/zero` is refused at once, naming it) of at most its limit
(`MAX_CLASS_TEXTS_BYTES`, `MAX_LABELS_BYTES`, `MAX_BOXES_BYTES`), as UTF-8 text; anything
else is a `BadFileError` naming the file.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from cvbench.utils.errors import BadFileError
from cvbench.utils.files import read_input

IMAGE_EXTENSIONS = frozenset(
    {".jpeg", ".jpg", ".jpe", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm"}
)
VALIDATION_DIR_NAMES = ("validation", "val")
VALIDATION_LABEL_FILES = (
    "ILSVRC2012_validation_ground_truth.txt",
    "imagenet_2012_validation_synset_labels.txt",
    "LOC_val_solution.csv",
)
CLASS_TEXT_FILES = ("imagenet_metadata.txt", "LOC_synset_mapping.txt")
#: The largest class text file read (ImageNet-21k's imagenet_metadata.txt has 2.6 MB).
MAX_CLASS_TEXTS_BYTES = 16 << 20
#: The largest validation label file or devkit meta.mat read (LOC_val_solution.csv: 2.5 MB).
MAX_LABELS_BYTES = 64 << 20
#: The largest bounding-box CSV read (ImageNet's 615,000 training boxes take about 40 MB).
MAX_BOXES_BYTES = 1 << 30

LAYOUT_FOLDERS = "class folders"
LAYOUT_FLAT = "flat"
LAYOUT_NONE = "none"

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class RawImages:
    """The images of a raw folder, with their classes.

    Attributes:
        classes: class names, sorted; record label = index + 1.
        train: (path, class) pairs, in file-name order.
        validation: (path, class) pairs, in file-name order (empty when there is none).
        validation_layout: `LAYOUT_FOLDERS`, `LAYOUT_FLAT` or `LAYOUT_NONE`.
        validation_source: a sentence saying what was found (and which label file was used).
        ignored: files that are not images by extension (hidden files are not listed).
        empty_class_dirs: training class folders holding no image (their classes get no
            training record), in class order.
    """

    classes: list[str]
    train: list[tuple[str, str]]
    validation: list[tuple[str, str]]
    validation_layout: str
    validation_source: str
    ignored: list[str] = field(default_factory=list)
    empty_class_dirs: list[str] = field(default_factory=list)

    def train_counts(self) -> dict[str, int]:
        """Class -> training images found (0 for an empty class folder), in class order."""
        return _counts(self.classes, self.train)

    def validation_counts(self) -> dict[str, int]:
        """Class -> validation images found, in class order."""
        return _counts(self.classes, self.validation)


def _counts(classes: list[str], pairs: list[tuple[str, str]]) -> dict[str, int]:
    counts = dict.fromkeys(classes, 0)
    for _, cls in pairs:
        counts[cls] += 1
    return counts


def _is_image(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _list_dir(path: Path) -> tuple[list[Path], list[Path]]:
    """(sub-folders, files) of `path`, sorted by name, hidden entries left out."""
    dirs, files = [], []
    with os.scandir(path) as it:
        for entry in it:
            if entry.name.startswith("."):
                continue
            (dirs if entry.is_dir() else files).append(Path(entry.path))
    return sorted(dirs), sorted(files)


class _Walk:
    """Walks class folders, following symbolic links to folders only where that is safe.

    A linked folder (a class folder, or a folder inside one) is followed when it points
    outside the raw data; one that points at a folder holding it (a loop: `train/x -> .`
    would make a class of every image again), into the raw data or above it, or at a folder
    already read (its images would be read twice) raises `BadFileError` naming the link.
    """

    def __init__(self, protected: list[Path]) -> None:
        self._protected = [p.resolve() for p in protected]
        self._seen: set[Path] = set()

    def _check_link(self, link: Path) -> None:
        target = link.resolve()
        if link.parent.resolve().is_relative_to(target):
            raise BadFileError(
                f"{link} is a symbolic link to {target}, a folder that holds it (a loop: every "
                "image would be read again); remove it"
            )
        for folder in self._protected:
            if target.is_relative_to(folder) or folder.is_relative_to(target):
                raise BadFileError(
                    f"{link} is a symbolic link to {target}, "
                    + ("inside" if target.is_relative_to(folder) else "above")
                    + f" the raw data folder {folder} (its images would be read twice); remove "
                    "it (a class folder may link to a folder outside the raw data)"
                )
        if target in self._seen:
            raise BadFileError(
                f"{link} is a symbolic link to {target}, a folder already read (its images "
                "would be read twice); remove it"
            )

    def images(self, folder: Path, ignored: list[str]) -> list[str]:
        """The image files under `folder` in `os.walk` order (a folder's files by name, then
        its sub-folders by name); other files go to `ignored`."""
        images = []
        stack = [folder]
        while stack:
            current = stack.pop()
            if current.is_symlink():
                self._check_link(current)
            real = current.resolve()
            if real in self._seen:
                continue
            self._seen.add(real)
            sub_dirs, files = _list_dir(current)
            for path in files:
                (images if _is_image(path.name) else ignored).append(str(path))
            stack.extend(reversed(sub_dirs))
        return images


def find_validation_dir(raw_dir: Path) -> Path | None:
    """`raw_dir/validation` or `raw_dir/val`, whichever exists first; None if neither.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "val").mkdir()
        ...     print(find_validation_dir(Path(d)).name, find_validation_dir(Path(d) / "val"))
        val None
    """
    for name in VALIDATION_DIR_NAMES:
        if (raw_dir / name).is_dir():
            return raw_dir / name
    return None


def discover(
    raw_dir: str | os.PathLike,
    *,
    train_dir: str | os.PathLike | None = None,
    validation_dir: str | os.PathLike | None = None,
    validation_labels: str | os.PathLike | None = None,
) -> RawImages:
    """Lists the training and validation images of a raw folder (see the module doc).

    Args:
        raw_dir: the raw folder.
        train_dir: the training folder; default `raw_dir/train`.
        validation_dir: the validation folder; default `raw_dir/validation` or `raw_dir/val`
            if one exists (no validation split otherwise).
        validation_labels: label file for a flat validation folder; default: looked for under
            the names in `VALIDATION_LABEL_FILES`.

    Raises:
        FileNotFoundError: a missing folder or file, or a flat validation folder without a
            label file.
        ValueError: no classes or images, classes in the validation data that are not training
            classes, or a label file that does not match the images.
    """
    raw = Path(raw_dir)
    if not raw.is_dir():
        raise FileNotFoundError(f"raw data directory {raw} does not exist")
    train = Path(train_dir) if train_dir is not None else raw / "train"
    if not train.is_dir():
        raise FileNotFoundError(
            f"training folder {train} does not exist; expected {raw}/train/<class>/<images>"
        )
    class_dirs, stray = _list_dir(train)
    if not class_dirs:
        raise ValueError(f"{train} has no class folders; expected {train}/<class>/<images>")
    ignored = [str(p) for p in stray]
    classes = [d.name for d in class_dirs]
    val = Path(validation_dir) if validation_dir is not None else find_validation_dir(raw)
    walk = _Walk([raw, train] + ([val] if val is not None and val.is_dir() else []))
    train_items, empty = [], []
    for d in class_dirs:
        images = walk.images(d, ignored)
        train_items += [(p, d.name) for p in images]
        if not images:
            empty.append(str(d))
    if not train_items:
        raise ValueError(
            f"no image files under {train}/<class>/ (extensions {sorted(IMAGE_EXTENSIONS)})"
        )

    if val is None:
        source = "no validation folder (train only)"
        return RawImages(classes, train_items, [], LAYOUT_NONE, source, ignored, empty)
    if not val.is_dir():
        raise FileNotFoundError(f"validation folder {val} does not exist")
    sub_dirs, files = _list_dir(val)
    flat_images = [p for p in files if _is_image(p.name)]
    if sub_dirs and flat_images:
        raise ValueError(
            f"{val} holds both class folders ({sub_dirs[0].name}, ...) and images "
            f"({flat_images[0].name}, ...); use one layout"
        )
    if sub_dirs:
        unknown = sorted({d.name for d in sub_dirs} - set(classes))
        if unknown:
            raise ValueError(
                f"validation class folders not among the {len(classes)} training classes: "
                f"{unknown[:10]}"
            )
        val_items = []
        for d in sub_dirs:
            val_items += [(p, d.name) for p in walk.images(d, ignored)]
        source = f"validation split into class folders in {val}"
        return RawImages(classes, train_items, val_items, LAYOUT_FOLDERS, source, ignored, empty)
    if not flat_images:
        raise ValueError(f"validation folder {val} holds no images and no class folders")
    ignored += [str(p) for p in files if not _is_image(p.name)]
    label_file = _find_label_file(raw, val, validation_labels)
    labels = read_validation_labels(label_file, [p.name for p in flat_images])
    unknown = sorted(set(labels) - set(classes))
    if unknown:
        raise ValueError(
            f"{label_file} names classes that are not training folders: {unknown[:10]}"
        )
    val_items = [(str(p), c) for p, c in zip(flat_images, labels, strict=True)]
    source = f"flat validation folder {val}, labels from {label_file}"
    return RawImages(classes, train_items, val_items, LAYOUT_FLAT, source, ignored, empty)


def _find_label_file(raw: Path, val: Path, given: str | os.PathLike | None) -> Path:
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise FileNotFoundError(f"validation label file {path} does not exist")
        return path
    for folder in (raw, val):
        for name in VALIDATION_LABEL_FILES:
            if (folder / name).is_file():
                return folder / name
    raise FileNotFoundError(
        f"{val} holds images directly (not in class folders) and no ground-truth label file was "
        f"given or found ({', '.join(VALIDATION_LABEL_FILES)} in {raw} or {val}); pass one "
        "(validation_labels=... / --val-labels), or split the images into class folders"
    )


def _read_text(path: str | os.PathLike, *, limit: int, what: str, newline: str | None = None):
    """The text of the regular UTF-8 file `path` of at most `limit` bytes, as a stream
    (`newline` as `open`'s).

    Raises:
        BadFileError: naming the file: not a regular file, over `limit`, not UTF-8.
    """
    data = read_input(path, limit=limit, what=what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadFileError(f"{what} {os.fspath(path)} is not UTF-8 text: {e}") from None
    return io.StringIO(text, newline=newline)


def _numbered_lines(path: Path, *, limit: int, what: str) -> list[tuple[int, str]]:
    """(line number from 1, stripped line) of each line of `path` that is not blank."""
    lines = enumerate(_read_text(path, limit=limit, what=what), start=1)
    return [(number, line.strip()) for number, line in lines if line.strip()]


def _data_lines(path: Path, *, limit: int, what: str) -> list[str]:
    return [line for _, line in _numbered_lines(path, limit=limit, what=what)]


def read_validation_labels(path: str | os.PathLike, filenames: list[str]) -> list[str]:
    """The class of each flat validation image, from a label file in one of three formats.

    Args:
        path: the label file (format detected from its first line, see the module doc).
        filenames: the image file names, sorted.

    Returns:
        One class name per file name, in the same order.

    Raises:
        ValueError: when the file does not cover the images exactly.
        BadFileError: naming the file and the line(s): a `<file name> <class>` line without a
            class, or an image given two classes (by two lines, or by its name and its name
            without extension); the same class twice is accepted.
    """
    path = Path(path)
    numbered = _numbered_lines(path, limit=MAX_LABELS_BYTES, what="validation label file")
    if numbered and numbered[0][1].lower().startswith(("imageid", "filename", "file_name")):
        numbered = numbered[1:]
    lines = [line for _, line in numbered]
    if not lines:
        raise ValueError(f"validation label file {path} is empty")
    if len(_label_fields(lines[0])) >= 2:
        by_name: dict[str, tuple[str, int]] = {}  # name -> (class, line number)
        for number, line in numbered:
            fields = _label_fields(line)
            if len(fields) < 2:
                raise BadFileError(f"{path} line {number}: expected 'file class', got {line!r}")
            name, label = fields[:2]
            earlier = by_name.setdefault(name, (label, number))
            if earlier[0] != label:
                raise _labelled_twice(path, name, earlier, (label, number))
        out, missing = [], []
        for f in filenames:
            # By its name or its name without extension: two lines may name one image.
            given = sorted({by_name[n] for n in (f, os.path.splitext(f)[0]) if n in by_name})
            if len(given) == 2 and given[0][0] != given[1][0]:
                raise _labelled_twice(path, f, *sorted(given, key=lambda g: g[1]))
            if not given:
                missing.append(f)
            out.append(given[0][0] if given else None)
        if missing:
            raise ValueError(
                f"{path} has no label for {len(missing)} of the {len(filenames)} validation "
                f"images, e.g. {missing[:3]}"
            )
        return out
    if len(lines) != len(filenames):
        raise ValueError(
            f"{path} has {len(lines)} labels but the validation folder holds {len(filenames)} "
            "images (one label per image, in file-name order)"
        )
    if all(line.isdigit() for line in lines):
        ids = read_devkit_synsets(path.parent / "meta.mat")
        try:
            return [ids[int(line)] for line in lines]
        except KeyError as e:
            raise ValueError(f"{path}: ILSVRC2012_ID {e.args[0]} is not in meta.mat") from None
    return lines


def _label_fields(line: str) -> list[str]:
    """The fields of a `<file name> <class> ...` line (separated by spaces or commas)."""
    return [t for t in re.split(r"[,\s]+", line) if t]


def _labelled_twice(path: Path, name: str, first: tuple[str, int], second: tuple[str, int]):
    return BadFileError(
        f"{path}: {name} is labelled twice: {first[0]} (line {first[1]}) and {second[0]} "
        f"(line {second[1]})"
    )


def read_devkit_synsets(meta_mat: str | os.PathLike) -> dict[int, str]:
    """ILSVRC2012_ID -> synset id, read from the ILSVRC2012 devkit's `data/meta.mat`."""
    meta_mat = Path(meta_mat)
    if not meta_mat.is_file():
        raise FileNotFoundError(
            f"the label file holds ILSVRC2012_IDs; their synsets are in the devkit's meta.mat, "
            f"expected at {meta_mat}"
        )
    try:
        from scipy.io import loadmat
    except ImportError:
        raise ValueError("reading the devkit's meta.mat needs scipy: pip install scipy") from None
    data = read_input(meta_mat, limit=MAX_LABELS_BYTES, what="devkit file")
    try:
        synsets = loadmat(io.BytesIO(data), squeeze_me=True)["synsets"]
    except Exception as e:  # scipy raises ValueError, KeyError, TypeError... on a bad file
        raise BadFileError(f"{meta_mat} is not the devkit's meta.mat: {e}") from None
    return {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in synsets}


def read_class_texts(path: str | os.PathLike) -> dict[str, str]:
    """Class name -> human-readable text, from `<class><tab or spaces><text>` lines."""
    texts = {}
    for line in _data_lines(Path(path), limit=MAX_CLASS_TEXTS_BYTES, what="class text file"):
        parts = line.split(None, 1)
        texts[parts[0]] = parts[1].strip() if len(parts) > 1 else parts[0]
    return texts


def find_class_texts(raw_dir: str | os.PathLike) -> Path | None:
    """A class text file under one of its usual names in `raw_dir`, or None."""
    for name in CLASS_TEXT_FILES:
        if (Path(raw_dir) / name).is_file():
            return Path(raw_dir) / name
    return None


def read_boxes(path: str | os.PathLike) -> dict[str, list[Box]]:
    """File name -> normalized `(xmin, ymin, xmax, ymax)` boxes, from the ImageNet box CSV.

    Coordinates are clipped to [0, 1]; boxes with no area after clipping are dropped.

    Raises:
        BadFileError: naming the line that is not `name,xmin,ymin,xmax,ymax` of finite
            numbers (`nan` or `inf` included, even on the first line; a bad input
            file: exit 1 in the command), or a file that is not a regular UTF-8 file of at
            most `MAX_BOXES_BYTES`.
    """
    boxes: dict[str, list[Box]] = {}
    with _read_text(path, limit=MAX_BOXES_BYTES, what="bounding-box file", newline="") as f:
        for number, row in enumerate(csv.reader(f), start=1):
            if not row or not "".join(row).strip():
                continue
            try:
                name = row[0].strip()
                values = [float(v) for v in row[1:5]]
                if len(values) != 4:
                    raise ValueError(row)
            except ValueError:
                if number == 1:  # a header line
                    continue
                raise BadFileError(
                    f"{path}:{number}: expected name,xmin,ymin,xmax,ymax, got {row!r}"
                ) from None
            if not all(math.isfinite(v) for v in values):  # nan would clip to 0.0, inf to 1.0
                raise BadFileError(
                    f"{path}:{number}: expected name,xmin,ymin,xmax,ymax (finite numbers), "
                    f"got {row!r}"
                )
            xmin, ymin, xmax, ymax = (min(1.0, max(0.0, v)) for v in values)
            if xmax > xmin and ymax > ymin:
                boxes.setdefault(name, []).append((xmin, ymin, xmax, ymax))
    return boxes
