"""A tiny raw ImageNet-style folder for the builder and pipeline tests (NumPy and Pillow only).

Layout written by `make_raw`:

    raw/train/n00000001/  4 RGB JPEGs + `odd_png.JPEG` (PNG bytes) + `broken.JPEG` (truncated)
    raw/train/n00000002/  4 RGB JPEGs + `odd_cmyk.JPEG` (a CMYK JPEG) + `notes.txt`
    raw/train/n00000003/  4 RGB JPEGs + `odd_gray.JPEG` (a grayscale JPEG)
    raw/validation/       2 images per class, flat + `val_labels.txt` (one class per line), or
                          in class folders (`val_layout="folders"`)

Every image is a smooth colour gradient (JPEG keeps smooth images close to the original, so
round trips can be checked pixel by pixel), 40 x 56 or 56 x 40 pixels.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ["n00000001", "n00000002", "n00000003"]
REGULAR_PER_CLASS = 4
VAL_PER_CLASS = 2
# 3 classes x 4 regular + the PNG, the CMYK and the grayscale one; the truncated file is skipped.
NUM_TRAIN_RECORDS = 3 * REGULAR_PER_CLASS + 3
NUM_VAL_RECORDS = 3 * VAL_PER_CLASS


def smooth_image(seed: int, height: int = 40, width: int = 56) -> np.ndarray:
    """A uint8 [height, width, 3] image: per-channel linear gradients set by `seed`."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, height)[:, None, None]
    x = np.linspace(0.0, 1.0, width)[None, :, None]
    base, dy, dx = rng.uniform(40, 120, 3), rng.uniform(-40, 60, 3), rng.uniform(-40, 60, 3)
    return np.clip(base + dy * y + dx * x, 0, 255).astype(np.uint8)


def encode(array: np.ndarray, fmt: str = "JPEG", mode: str | None = None, **kwargs) -> bytes:
    image = Image.fromarray(array)
    if mode is not None:
        image = image.convert(mode)
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


@dataclass
class RawSet:
    """What `make_raw` wrote: the folder and the pixels of every good image by file name."""

    root: Path
    pixels: dict[str, np.ndarray] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)  # file name -> label 1..3


def make_raw(root: Path, val_layout: str = "flat") -> RawSet:
    """Writes the raw folder described in the module docstring under `root`."""
    raw = RawSet(root)
    seed = 0
    for label, cls in enumerate(CLASSES, start=1):
        folder = root / "train" / cls
        folder.mkdir(parents=True)
        for i in range(REGULAR_PER_CLASS):
            seed += 1
            shape = (40, 56) if i % 2 == 0 else (56, 40)
            array = smooth_image(seed, *shape)
            name = f"{cls}_{i}.JPEG"
            (folder / name).write_bytes(encode(array, quality=95))
            raw.pixels[name], raw.labels[name] = array, label
    odd = {
        "odd_png.JPEG": ("PNG", None, CLASSES[0]),
        "odd_cmyk.JPEG": ("JPEG", "CMYK", CLASSES[1]),
        "odd_gray.JPEG": ("JPEG", "L", CLASSES[2]),
    }
    for name, (fmt, mode, cls) in odd.items():
        seed += 1
        array = smooth_image(seed)
        kwargs = {"quality": 95} if fmt == "JPEG" else {}
        (root / "train" / cls / name).write_bytes(encode(array, fmt, mode, **kwargs))
        if mode == "L":  # the record holds the gray image as RGB
            array = np.repeat(np.asarray(Image.fromarray(array).convert("L"))[..., None], 3, -1)
        raw.pixels[name], raw.labels[name] = array, CLASSES.index(cls) + 1
    good = encode(smooth_image(999))
    (root / "train" / CLASSES[0] / "broken.JPEG").write_bytes(good[: len(good) // 2])
    (root / "train" / CLASSES[1] / "notes.txt").write_text("not an image\n")

    val = root / "validation"
    val.mkdir()
    lines = []
    for k in range(NUM_VAL_RECORDS):
        seed += 1
        cls = CLASSES[k % len(CLASSES)]
        array = smooth_image(seed)
        name = f"val_{k:04d}.JPEG"
        folder = val / cls if val_layout == "folders" else val
        folder.mkdir(exist_ok=True)
        (folder / name).write_bytes(encode(array, quality=95))
        raw.pixels[name], raw.labels[name] = array, CLASSES.index(cls) + 1
        lines.append(cls)
    if val_layout == "flat":
        (root / "val_labels.txt").write_text("\n".join(lines) + "\n")
    return raw
