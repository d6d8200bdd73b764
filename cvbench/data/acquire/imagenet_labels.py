"""The labels of the ILSVRC2012 archives: the devkit's validation ground truth and class
texts, or a labels file in its place.

- `ILSVRC2012_devkit_t12.tar.gz`: `data/ILSVRC2012_validation_ground_truth.txt` (one
  ILSVRC2012_ID, 1..1000, per validation image in order) and `data/meta.mat` (ILSVRC2012_ID
  -> WNID and words, a MATLAB file read with scipy).
- a labels file (`load_val_labels_file`): one WNID per validation image, or Kaggle's
  `LOC_val_solution.csv`.

Labels are `{"ILSVRC2012_val_00000001": "n01751748", ...}` (image name without extension ->
WNID); every WNID is checked to look like `n01440764` before it becomes a folder name.
`reading_archive` turns a truncated or corrupt archive into `BadFileError` naming it.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cvbench.utils.errors import BadFileError, naming
from cvbench.utils.files import open_input, read_input
from cvbench.utils.io import atomic_open

#: A WordNet id (synset) as ImageNet names its classes: `n` and 8 digits.
WNID = re.compile(r"n\d{8}")
_VAL_NAME = "ILSVRC2012_val_{:08d}"
_GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"
_META = "data/meta.mat"
_NUM_CLASSES = 1000  # ILSVRC2012_IDs 1..1000 are the classes; higher ids are their ancestors


#: What a truncated or corrupt tar (or .tar.gz) raises while it is read.
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error)


#: The largest labels file, and devkit member (meta.mat, the ground truth), read.
MAX_LABELS_BYTES = 64 << 20


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo, devkit: Path) -> bytes:
    """The data of `member`, refused over `MAX_LABELS_BYTES` before it is read."""
    if member.size > MAX_LABELS_BYTES:
        raise BadFileError(
            f"{devkit}: member {member.name} has {member.size} bytes, over the limit of "
            f"{MAX_LABELS_BYTES} bytes; is this the t12 devkit?"
        )
    return tar.extractfile(member).read(MAX_LABELS_BYTES + 1)


@contextlib.contextmanager
def reading_archive(archive: Path, what: str = "") -> Iterator[None]:
    """Turns a truncated or corrupt archive into `BadFileError` naming it (and `what`, a
    member), a gzip error included."""
    try:
        yield
    except _ARCHIVE_ERRORS as e:
        raise BadFileError(
            f"{archive}{what}: not a complete tar archive ({e}); download it again"
        ) from None
    except gzip.BadGzipFile as e:
        raise BadFileError(
            f"{archive}{what}: not a complete .tar.gz ({e}); download it again"
        ) from None


def _read_devkit(devkit: str | os.PathLike) -> tuple[list[int], dict[int, tuple[str, str]]]:
    """(ground-truth ILSVRC2012_IDs in image order, ILSVRC2012_ID -> (WNID, words))."""
    try:
        import scipy.io
    except ImportError as e:
        raise ValueError(
            "reading the devkit's meta.mat needs scipy (pip install scipy); or pass a labels "
            "file with --val-labels instead of the devkit (one WNID per validation image)"
        ) from e
    devkit = Path(devkit)
    ground_truth = meta = None
    with (
        reading_archive(devkit),
        open_input(devkit, what="devkit") as raw,
        tarfile.open(fileobj=raw, mode="r:*") as tar,
    ):
        for member in tar:
            if member.name.endswith(_GROUND_TRUTH) and member.isfile():
                ground_truth = _member_bytes(tar, member, devkit)
            elif member.name.endswith(_META) and member.isfile():
                meta = _member_bytes(tar, member, devkit)
    if ground_truth is None or meta is None:
        raise BadFileError(f"{devkit}: no {_GROUND_TRUTH} and {_META}; is this the t12 devkit?")
    table = _synset_table(devkit, meta, scipy.io)
    ids = []
    for number, line in enumerate(ground_truth.splitlines(), start=1):
        if line.strip():
            if not line.strip().isdigit():
                raise BadFileError(
                    f"{devkit}: {_GROUND_TRUTH} line {number} is not an ILSVRC2012_ID: "
                    f"{line[:40]!r}"
                )
            ids.append(int(line))
    return ids, table


def _synset_table(devkit: Path, meta: bytes, scipy_io: Any) -> dict[int, tuple[str, str]]:
    """ILSVRC2012_ID -> (WNID, words) from the bytes of `meta.mat`, every WNID checked."""
    try:
        synsets = np.atleast_1d(scipy_io.loadmat(io.BytesIO(meta), squeeze_me=True)["synsets"])
        rows = zip(synsets["ILSVRC2012_ID"], synsets["WNID"], synsets["words"], strict=True)
        rows = [(int(i), str(w), str(t)) for i, w, t in rows]
    except (ValueError, TypeError, KeyError, IndexError, OSError) as e:
        raise BadFileError(
            f"{devkit}: {_META} is not the devkit's synset table (ILSVRC2012_ID, WNID, words): "
            f"{e!r}"
        ) from None
    table = {}
    for class_id, wnid, words in rows:
        if not WNID.fullmatch(wnid):
            raise BadFileError(
                f"{devkit}: {_META}: ILSVRC2012_ID {class_id} has WNID {wnid[:40]!r}, not a WNID "
                "like n01440764"
            )
        table[class_id] = (wnid, " ".join(words.split()))  # one line of the class texts
    return table


def load_val_labels_from_devkit(devkit: str | os.PathLike) -> dict[str, str]:
    """Reads the validation labels from `ILSVRC2012_devkit_t12.tar.gz`.

    Needs scipy (for `data/meta.mat`, a MATLAB file mapping ILSVRC2012_ID to WNID).

    Returns:
        {"ILSVRC2012_val_00000001": "n01751748", ...}: image name without extension -> WNID.

    Raises:
        ValueError: scipy is missing.
        BadFileError: the devkit lacks the ground truth or meta.mat, is corrupt, or names a
            WNID that is not one (`n` and 8 digits).
    """
    ids, table = _read_devkit(devkit)
    labels = {}
    for index, class_id in enumerate(ids, start=1):
        if class_id not in table:
            raise BadFileError(
                f"{devkit}: ground truth names ILSVRC2012_ID {class_id}, not in meta"
            )
        labels[_VAL_NAME.format(index)] = table[class_id][0]
    return labels


def write_class_texts(devkit: str | os.PathLike, path: str | os.PathLike) -> int:
    """Writes `<WNID>\t<words>` for the 1000 classes (ILSVRC2012_ID 1..1000) from the devkit.

    The file (`imagenet_metadata.txt` in the output folder) is what `build-imagenet` reads for
    `image/class/text`. Needs scipy.

    Returns:
        The number of classes written.
    """
    _, table = _read_devkit(devkit)
    rows = [table[i] for i in sorted(table) if 1 <= i <= _NUM_CLASSES]
    with naming(path), atomic_open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{wnid}\t{words}\n" for wnid, words in rows)
    return len(rows)


def load_val_labels_file(path: str | os.PathLike) -> dict[str, str]:
    """Reads validation labels from a text file, the alternative to the devkit.

    Two formats:
    - one WNID per line, the i-th line for `ILSVRC2012_val_<i>` (8 digits, from 1), like the
      `imagenet_2012_validation_synset_labels.txt` of the TF-slim / TPU ImageNet scripts;
    - Kaggle's `LOC_val_solution.csv`: a header, then `ImageId,PredictionString` rows whose
      prediction string starts with the WNID.

    Returns:
        Image name without extension -> WNID.

    Raises:
        BadFileError: a line that is not a WNID (or not `ImageId,PredictionString`), or an
            empty file.
    """
    path = Path(path)
    data = read_input(path, limit=MAX_LABELS_BYTES, what="labels file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadFileError(f"{path}: not a text file of WNIDs ({e})") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    labels = {}
    if lines and lines[0].lower().startswith("imageid"):
        for number, line in enumerate(lines[1:], start=2):
            image_id, _, prediction = line.partition(",")
            if not prediction.split():
                raise BadFileError(
                    f"{path}: line {number} is not 'ImageId,PredictionString': {line[:60]!r}"
                )
            labels[image_id.strip()] = prediction.split()[0]
    else:
        for index, wnid in enumerate(lines, start=1):
            labels[_VAL_NAME.format(index)] = wnid
    bad = [w for w in labels.values() if not WNID.fullmatch(w)]
    if bad or not labels:
        raise BadFileError(f"{path}: expected WNIDs like n01440764, got {bad[:3] or 'nothing'}")
    return labels
