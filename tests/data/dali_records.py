"""A tiny ImageNet-format record set with DALI index files, for the DALI tests.

`write_records(root)` writes 64x48 smooth-gradient JPEGs (`imagenet_testdata.smooth_image`),
each with its own stored label (1..N, so a 0-based label names its record):

    train-00000-of-00002       labels 1, 2, 3
    train-00001-of-00002       labels 4, 5, 6
    validation-00000-of-00002  labels 7, 8, 9
    validation-00001-of-00002  labels 10, 11

and `idx/<shard>.idx` for each (`cvbench.data.dali_index.write_index`).
"""

from __future__ import annotations

from pathlib import Path

from imagenet_testdata import encode, smooth_image

from cvbench.data.dali_index import write_index
from cvbench.data.tfrecord import imagenet_example

LAYOUT = {
    "train-00000-of-00002": [1, 2, 3],
    "train-00001-of-00002": [4, 5, 6],
    "validation-00000-of-00002": [7, 8, 9],
    "validation-00001-of-00002": [10, 11],
}
NUM_CLASSES = 11
HEIGHT, WIDTH = 48, 64


def write_records(root: Path, *, index: bool = True) -> Path:
    """Writes `LAYOUT` under `root` (and the index files unless `index` is False)."""
    import tensorflow as tf

    root.mkdir(parents=True, exist_ok=True)
    for name, labels in LAYOUT.items():
        with tf.io.TFRecordWriter(str(root / name)) as writer:
            for label in labels:
                pixels = smooth_image(label, HEIGHT, WIDTH)
                writer.write(
                    imagenet_example(
                        encoded=encode(pixels, quality=95),
                        height=HEIGHT,
                        width=WIDTH,
                        label=label,
                        synset=f"n{label:08d}",
                        text=f"class {label}",
                        filename=f"img_{label}.JPEG",
                    )
                )
        if index:
            write_index(root / name)
    return root
