"""ImageNet-format TFRecord files of small random JPEGs, for the CLI and fault tests."""

from __future__ import annotations

import io
from collections.abc import Collection
from pathlib import Path

import numpy as np


def write_jpeg_records(
    path: Path,
    count: int,
    *,
    num_classes: int = 4,
    corrupt: Collection[int] = (),
    prefix: str = "img",
    seed: int = 0,
) -> Path:
    """Writes `count` records of 40x40 random JPEGs to the TFRecord file `path`.

    Record i is `<prefix>_<i>.JPEG` with the stored (1-based) label `i % num_classes + 1`;
    the records in `corrupt` hold bytes that are no image.
    """
    import tensorflow as tf
    from PIL import Image

    from cvbench.data.tfrecord import imagenet_example

    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(count):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(buf, "JPEG")
            label = i % num_classes + 1
            writer.write(
                imagenet_example(
                    encoded=b"no image here" if i in corrupt else buf.getvalue(),
                    height=40,
                    width=40,
                    label=label,
                    synset=f"n{label:08d}",
                    text=f"class {label}",
                    filename=f"{prefix}_{i}.JPEG",
                )
            )
    return path
