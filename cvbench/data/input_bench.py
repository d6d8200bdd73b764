"""Input pipeline benchmark: the training pipeline with the crop fused into JPEG decoding,
against the same pipeline decoding the whole image before cropping.

Both pipelines are `imagenet_dataset(..., training=True)` over the same records, differing
only in `train_preprocess` (`preprocess_for_train` or `preprocess_for_train_reference`), so the
ratio isolates the fused decode. Rounds alternate between the two, and the median round is
reported, which keeps other load on the machine from favouring one side. Throughput is given
per wall-clock second and per CPU-second used by the process ("per core"), the latter being
the fair figure on a machine shared with other work. The decode-and-crop step is also timed
alone, one image at a time: the pipeline's ratio cannot exceed that step's, since everything
else costs both pipelines the same.

Without a data directory, `write_benchmark_records` makes ImageNet-like JPEGs of 500 x 375 (the
most common ImageNet size) at quality 90, from one of two sources:

* `"generated"`: smooth random colour fields with pixel noise, about 80 KiB each;
* `"photos"`: random rescaled views of real photographs available offline (matplotlib's
  `grace_hopper.jpg`, and scikit-image's astronaut, coffee, chelsea and rocket when
  scikit-image is installed), re-encoded: about 44 KiB each, since photographs have less fine
  detail than the noise.
"""

from __future__ import annotations

import io
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from cvbench.data.sharded_writer import format_bytes
from cvbench.data.tfrecord import imagenet_example
from cvbench.data.worker_pool import default_num_workers


def photo_like_jpeg(rng: np.random.Generator, height: int, width: int, quality: int) -> bytes:
    """A JPEG of a smooth random colour field with pixel noise (compresses like a photo)."""
    coarse = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC))
    noisy = field.astype(np.int16) + rng.integers(-20, 21, (height, width, 3), dtype=np.int16)
    buf = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


SOURCES = ("generated", "photos")
SKIMAGE_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")


def sample_photos() -> dict[str, np.ndarray]:
    """Real photographs that ship with installed packages, as uint8 [height, width, 3] RGB.

    Always matplotlib's `grace_hopper.jpg` (600 x 512); also scikit-image's astronaut
    (512 x 512), coffee (400 x 600), chelsea (300 x 451) and rocket (427 x 640) when
    scikit-image is installed. Nothing is downloaded.
    """
    import matplotlib

    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    with Image.open(path) as image:
        photos = {"grace_hopper": np.asarray(image.convert("RGB"))}
    try:
        import skimage.data
    except ImportError:
        return photos
    for name in SKIMAGE_PHOTOS:
        photos[name] = np.asarray(getattr(skimage.data, name)())[..., :3]
    return photos


def photo_view_jpeg(
    rng: np.random.Generator, photo: np.ndarray, height: int, width: int, quality: int
) -> bytes:
    """A random `height` x `width` view of a photograph, as a JPEG.

    The photo is rescaled (bicubic) by a random factor between 1 and 1.4 times the smallest
    scale at which it covers `height` x `width`, a window at a random position is cut out and
    mirrored with probability 1/2, then encoded at `quality` (4:2:0 chroma, Pillow's default).
    """
    photo_h, photo_w = photo.shape[:2]
    scale = max(height / photo_h, width / photo_w) * rng.uniform(1.0, 1.4)
    size = (max(width, round(photo_w * scale)), max(height, round(photo_h * scale)))
    image = Image.fromarray(photo).resize(size, Image.Resampling.BICUBIC)
    top = int(rng.integers(0, image.height - height + 1))
    left = int(rng.integers(0, image.width - width + 1))
    image = image.crop((left, top, left + width, top + height))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def write_benchmark_records(
    out_dir: str | os.PathLike,
    *,
    num_images: int = 256,
    height: int = 375,
    width: int = 500,
    quality: int = 90,
    num_shards: int = 4,
    seed: int = 0,
    source: str = "generated",
) -> int:
    """Writes `num_images` JPEG records as `train-0000k-of-0000n`; returns their JPEG bytes.

    Args:
        out_dir: where to write the shards.
        num_images: records in all.
        height: image height.
        width: image width.
        quality: JPEG quality.
        num_shards: files.
        seed: makes the images reproducible.
        source: `"generated"` (`photo_like_jpeg`) or `"photos"` (`photo_view_jpeg` of the
            `sample_photos`, taken in turn).
    """
    import tensorflow as tf

    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    rng = np.random.default_rng(seed)
    photos = list(sample_photos().values()) if source == "photos" else []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for shard in range(num_shards):
        path = out / f"train-{shard:05d}-of-{num_shards:05d}"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for i in range(shard, num_images, num_shards):
                if photos:
                    data = photo_view_jpeg(rng, photos[i % len(photos)], height, width, quality)
                else:
                    data = photo_like_jpeg(rng, height, width, quality)
                total += len(data)
                writer.write(
                    imagenet_example(
                        encoded=data,
                        height=height,
                        width=width,
                        label=1 + i % 10,
                        synset=f"class{i % 10}",
                        text=f"class {i % 10}",
                        filename=f"bench_{i}.JPEG",
                    )
                )
    return total


@dataclass(frozen=True)
class PipelineRate:
    """Throughput of one pipeline (median over rounds).

    Attributes:
        images_per_s: images per wall-clock second, all cores together.
        images_per_cpu_s: images per second of CPU time used by this process (user + system,
            all threads): the throughput of one fully used core. Unlike the wall-clock figure
            it is not lowered by other programs competing for the cores.
        rounds: (images_per_s, images_per_cpu_s) of every round.
    """

    images_per_s: float
    images_per_cpu_s: float
    rounds: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class InputBenchResult:
    """The fused pipeline against the decode-then-crop baseline.

    Attributes:
        fused: the training pipeline (crop fused into JPEG decoding).
        baseline: the same pipeline decoding the whole image, then cropping.
        decode_ms: (fused, baseline) CPU milliseconds per image of the decode-and-crop step
            alone, one image at a time (median over rounds).
        cores: CPU cores available to the process.
        nvidia_decode_ms: `decode_ms` with the JPEG decoder options of NVIDIA's scripts
            (`preprocessing.NVIDIA_JPEG_OPTIONS`) on both sides; None if not measured.
    """

    fused: PipelineRate
    baseline: PipelineRate
    decode_ms: tuple[float, float]
    cores: int
    nvidia_decode_ms: tuple[float, float] | None = None

    @property
    def ratio(self) -> float:
        """fused / baseline images per CPU-second (per core)."""
        return self.fused.images_per_cpu_s / self.baseline.images_per_cpu_s

    @property
    def wall_ratio(self) -> float:
        """fused / baseline images per wall-clock second."""
        return self.fused.images_per_s / self.baseline.images_per_s

    def format(self) -> str:
        """The lines the benchmark prints."""

        def line(name: str, rate: PipelineRate) -> str:
            return (
                f"{name:34s} {rate.images_per_s:8.1f} img/s  "
                f"{rate.images_per_cpu_s:7.1f} img/s per core"
            )

        def step(ms: tuple[float, float]) -> str:
            return (
                f"fused {ms[0]:.2f} ms/img, whole image {ms[1]:.2f} ms/img ({ms[1] / ms[0]:.2f}x)"
            )

        lines = [
            f"training pipeline, {self.cores} cores (per core = images / CPU seconds used)",
            line("fused decode-and-crop (cvbench):", self.fused),
            line("decode whole image, then crop:", self.baseline),
            f"ratio fused / baseline: {self.ratio:.2f}x per core, {self.wall_ratio:.2f}x img/s",
            f"decode-and-crop step alone, one image at a time: {step(self.decode_ms)}",
        ]
        if self.nvidia_decode_ms is not None:
            lines.append(
                "  same, NVIDIA's decoder options (INTEGER_FAST, no fancy upscaling): "
                + step(self.nvidia_decode_ms)
            )
        return "\n".join(lines)


def _measure(ds: Any, warmup_batches: int, batches: int, batch_size: int) -> tuple[float, float]:
    iterator = iter(ds)
    for _ in range(warmup_batches):
        next(iterator)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(iterator)
    images = batches * batch_size
    return images / (time.perf_counter() - wall), images / (time.process_time() - cpu)


def _rate(rounds: list[tuple[float, float]]) -> PipelineRate:
    return PipelineRate(
        statistics.median(r[0] for r in rounds),
        statistics.median(r[1] for r in rounds),
        tuple(rounds),
    )


def _decode_step_ms(
    data_dir: str | os.PathLike, images: int = 64, repeats: int = 12, **decode_options: Any
) -> tuple:
    """CPU ms per image of decode-and-random-crop, fused and whole-image, one image at a time.

    Each timed call decodes all `images` inside one `tf.function` (a sequential `map_fn`), so
    the fixed cost of calling a function from Python (about 0.5 ms, as much as a decode) is
    paid once per call, not once per image, and does not dilute the ratio.
    """
    import tensorflow as tf

    from cvbench.data.preprocessing import decode_and_random_crop, decode_then_random_crop
    from cvbench.data.reader import list_split_files
    from cvbench.data.tfrecord import iter_tfrecord

    encoded = []
    for path in list_split_files(data_dir, "train"):
        for record in iter_tfrecord(path):
            feature = tf.train.Example.FromString(record).features.feature
            encoded.append(feature["image/encoded"].bytes_list.value[0])
            if len(encoded) == images:
                break
        if len(encoded) == images:
            break
    encoded = tf.constant(encoded)
    no_boxes = tf.zeros([0, 4])

    def step(decode: Any) -> Any:
        def one(args: Any) -> tf.Tensor:
            # The sum makes every pixel of the crop needed, so nothing is pruned away.
            crop = decode(args[0], no_boxes, args[1], **decode_options)
            return tf.reduce_sum(tf.cast(crop, tf.int32))

        @tf.function
        def all_images(data: tf.Tensor, round_index: tf.Tensor) -> tf.Tensor:
            n = tf.size(data, out_type=tf.int64)
            seeds = tf.stack([tf.fill([n], round_index), tf.range(n)], axis=1)
            return tf.map_fn(
                one, (data, seeds), fn_output_signature=tf.int32, parallel_iterations=1
            )

        return all_images

    steps = [step(d) for d in (decode_and_random_crop, decode_then_random_crop)]
    per_round: list[list[float]] = [[], []]
    for r in range(repeats + 1):  # round 0 traces and warms up
        for k, fn in enumerate(steps):  # alternate, so load changes hit both alike
            start = time.process_time()
            fn(encoded, tf.constant(r, tf.int64))  # same seeds, same crops
            if r > 0:
                per_round[k].append((time.process_time() - start) / int(encoded.shape[0]))
    return tuple(statistics.median(t) * 1e3 for t in per_round)


def run_input_benchmark(
    data_dir: str | os.PathLike,
    *,
    batch_size: int = 64,
    image_size: int = 224,
    warmup_batches: int = 4,
    batches: int = 20,
    rounds: int = 3,
    shuffle_buffer: int = 256,
) -> InputBenchResult:
    """Measures both training pipelines on the `train` split of `data_dir`.

    Args:
        data_dir: ImageNet-format TFRecords.
        batch_size: images per batch.
        image_size: output size.
        warmup_batches: batches read before timing each round.
        batches: timed batches per round.
        rounds: alternating rounds per pipeline; the median is reported.
        shuffle_buffer: records in the shuffle buffer.
    """
    from cvbench.data.imagenet import imagenet_dataset
    from cvbench.data.preprocessing import (
        NVIDIA_JPEG_OPTIONS,
        preprocess_for_train,
        preprocess_for_train_reference,
    )

    for name, value in (("batches", batches), ("rounds", rounds), ("batch_size", batch_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")

    def pipeline(preprocess: Any) -> Any:
        def fn(image_bytes: Any, boxes: Any, seed: Any) -> Any:
            return preprocess(image_bytes, boxes, seed, image_size=image_size)

        return imagenet_dataset(
            data_dir,
            "train",
            batch_size=batch_size,
            image_size=image_size,
            training=True,
            num_shards=1,
            shard_index=0,
            shuffle_buffer=shuffle_buffer,
            train_preprocess=fn,
        )

    fused, baseline = [], []
    for _ in range(rounds):
        for preprocess, out in (
            (preprocess_for_train, fused),
            (preprocess_for_train_reference, baseline),
        ):
            out.append(_measure(pipeline(preprocess), warmup_batches, batches, batch_size))
    return InputBenchResult(
        _rate(fused),
        _rate(baseline),
        _decode_step_ms(data_dir),
        default_num_workers(),
        _decode_step_ms(data_dir, **NVIDIA_JPEG_OPTIONS),
    )


def describe_records(
    num_images: int, total_bytes: int, height: int, width: int, source: str = "generated"
) -> str:
    """One line describing benchmark records made by `write_benchmark_records`."""
    average = format_bytes(total_bytes // max(1, num_images))
    if source == "photos":
        names = ", ".join(sample_photos())
        return (
            f"{num_images} JPEGs {width}x{height} cut from photographs ({names}), "
            f"{average} on average"
        )
    return f"{num_images} generated JPEGs {width}x{height}, {average} on average"
