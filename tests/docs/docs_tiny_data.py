"""Tiny stand-ins for the data sets the docs name (`/data/imagenet-raw`, `/data/coco`, ...).

Each maker writes into an empty folder and returns it. The raw sets come from the demo's
shapes generator (`cvbench.demo.shapes_data`), the TFRecords from the real builders, the
ILSVRC2012 archives are laid out as the official ones (a tar of per-class tars, a flat
validation tar, a devkit with `meta.mat` and the ground-truth ids).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

from cvbench.demo.shapes_data import write_classification_set, write_detection_set

# Two synsets, named as real ones so that the docs' example paths (n01440764/...) exist.
SYNSETS = ("n01440764", "n01443537")
TRAIN_PER_SYNSET = 2
VAL_IDS = (1, 2, 2, 1)  # ILSVRC2012_ID (1-based index into SYNSETS) of validation image k


def imagenet_raw(root: Path) -> Path:
    """A folder-per-class set: train/<class>/*.JPEG (6 classes x 2), val/<class>/ (x 1)."""
    write_classification_set(root, image_size=32, train_per_class=2, val_per_class=1, seed=0)
    return root


def imagenet_records(root: Path, raw: Path) -> Path:
    """ImageNet-format TFRecords of `raw`: 2 train shards, 1 validation shard."""
    from cvbench.data.builders.imagenet_builder import build_imagenet

    build_imagenet(raw, root, train_shards=2, val_shards=1, num_workers=1, progress=False)
    return root


def coco_raw(root: Path) -> Path:
    """COCO 2017's layout: train2017/, val2017/, annotations/instances_{train,val}2017.json."""
    write_detection_set(
        root, image_size=64, num_train=6, num_val=3, seed=1, split_names=("train2017", "val2017")
    )
    return root


def coco_records(root: Path, raw: Path) -> Path:
    """Object Detection API TFRecords of `raw` (train and val), val annotations beside them."""
    from cvbench.data.builders.coco_builder import build_coco_splits

    sources = {
        split: (raw / "annotations" / f"instances_{split}2017.json", raw / f"{split}2017")
        for split in ("train", "val")
    }
    build_coco_splits(root, sources, num_workers=1, progress=False)
    return root


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _tar(members: dict[str, bytes], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def imagenet_archives(root: Path) -> Path:
    """The three ILSVRC2012 downloads under their official names, with a handful of images."""
    import scipy.io

    root.mkdir(parents=True, exist_ok=True)
    per_class = {
        f"{s}.tar": _tar({f"{s}_{10026 + i}.JPEG": _jpeg(i) for i in range(TRAIN_PER_SYNSET)})
        for s in SYNSETS
    }
    (root / "ILSVRC2012_img_train.tar").write_bytes(_tar(per_class))
    val = {f"ILSVRC2012_val_{k:08d}.JPEG": _jpeg(100 + k) for k in range(1, len(VAL_IDS) + 1)}
    (root / "ILSVRC2012_img_val.tar").write_bytes(_tar(val))
    dtype = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")]
    synsets = np.array(
        [(i + 1, w, f"class {i + 1}", 0) for i, w in enumerate(SYNSETS)], dtype=dtype
    )
    meta = io.BytesIO()
    scipy.io.savemat(meta, {"synsets": synsets})
    data = "ILSVRC2012_devkit_t12/data/"
    devkit = {
        data + "ILSVRC2012_validation_ground_truth.txt": "".join(
            f"{i}\n" for i in VAL_IDS
        ).encode(),
        data + "meta.mat": meta.getvalue(),
    }
    (root / "ILSVRC2012_devkit_t12.tar.gz").write_bytes(_tar(devkit, "w:gz"))
    return root


def resnet50_notop_h5(path: Path, write_legacy_h5) -> Path:
    """keras.applications' ResNet50 `_notop` weight file (random weights, legacy HDF5 layout)."""
    import keras

    model = keras.applications.ResNet50(weights=None, include_top=False)
    return write_legacy_h5(model, path, 0)


def coco_archives(root: Path, raw: Path) -> dict[str, tuple[str, int, str]]:
    """COCO 2017's three zips, made from the tiny `raw` set, at their official paths under
    `root`; returns part -> (path, size, MD5), the shape of `coco_download.COCO_2017_FILES`."""
    parts = {
        "annotations": ("annotations/annotations_trainval2017.zip", ["annotations"]),
        "val": ("zips/val2017.zip", ["val2017"]),
        "train": ("zips/train2017.zip", ["train2017"]),
    }
    table = {}
    for part, (path, folders) in parts.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(target, "w") as zf:
            for folder in folders:
                for file in sorted((raw / folder).rglob("*")):
                    zf.write(file, file.relative_to(raw).as_posix())
        data = target.read_bytes()
        table[part] = (path, len(data), hashlib.md5(data).hexdigest())
    return table
