"""Tiny ImageNet-format records for the grain tests: a few images of several sizes and kinds.

`write_split(root, split, sizes)` writes one or more shards `<split>-0000k-of-0000n` of
photo-like JPEGs (a smooth gradient plus noise, `imagenet_testdata.smooth_image`), one record
per entry of `sizes` (height, width), record `i` with the stored label `i % num_classes + 1`
and the file name `img_<i>.JPEG`. `kinds` may replace some images by a grayscale JPEG or a
PNG (the decoder's other paths). Written with `tf.io.TFRecordWriter` (valid CRCs, which the
tf.data reader checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from imagenet_testdata import encode, smooth_image

from cvbench.data.tfrecord import imagenet_example

# heights x widths: upscaled (40 x 56), downscaled (375 x 500), portrait, odd sizes
SIZES = [(40, 56), (375, 500), (300, 211), (257, 256), (97, 333), (224, 224), (500, 375)]


def photo(seed: int, height: int, width: int) -> np.ndarray:
    """A smooth gradient plus noise: JPEG blocks with texture, like a photograph's."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, 12.0, (height, width, 3))
    return np.clip(smooth_image(seed, height, width) + noise, 0, 255).astype(np.uint8)


def write_split(
    root: Path,
    split: str,
    sizes: Sequence[tuple[int, int]] = SIZES,
    *,
    num_shards: int = 1,
    num_classes: int = 5,
    kinds: dict[int, str] | None = None,
    seed: int = 0,
) -> list[Path]:
    """Writes `len(sizes)` records in `num_shards` shards (dealt in order); returns them."""
    import tensorflow as tf

    root.mkdir(parents=True, exist_ok=True)
    kinds = kinds or {}
    per_shard = -(-len(sizes) // num_shards)
    paths = []
    for k in range(num_shards):
        path = root / f"{split}-{k:05d}-of-{num_shards:05d}"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for i in range(k * per_shard, min(len(sizes), (k + 1) * per_shard)):
                height, width = sizes[i]
                pixels = photo(seed + i, height, width)
                kind = kinds.get(i, "jpeg")
                if kind == "gray":
                    data = encode(pixels, "JPEG", "L", quality=90)
                elif kind == "png":
                    data = encode(pixels, "PNG")
                else:
                    data = encode(pixels, quality=90)
                label = i % num_classes + 1
                writer.write(
                    imagenet_example(
                        encoded=data,
                        height=height,
                        width=width,
                        label=label,
                        synset=f"n{label:08d}",
                        text=f"class {label}",
                        filename=f"img_{i}.JPEG",
                    )
                )
        paths.append(path)
    return paths
