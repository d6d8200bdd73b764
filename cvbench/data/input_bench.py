"""Input pipeline benchmark: the training pipeline with the crop fused into JPEG decoding,
against the same pipeline decoding the whole image before cropping.

Both pipelines are `imagenet_dataset(..., training=True)` over the same records, differing
only in `train_preprocess` (`preprocess_for_train` or `preprocess_for_train_reference`), so the
ratio isolates the fused decode. Rounds alternate between the two, and the median round is
reported, which keeps other load on the machine from favouring one side. Throughput is given
per wall-clock second and per CPU-second used by the process ("per core"), the latter being
the fair figure on a machine shared with other work. The decode-and-crop step is also timed
alone, on one thread.

Without a data directory, `write_benchmark_records` makes ImageNet-like JPEGs (500 x 375, the
most common ImageNet size, about 80 KiB at quality 90: smooth colour fields with fine noise,
which compress like photographs).
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

from cvbench.data.sharded_writer import default_num_workers, format_bytes
from cvbench.data.tfrecord import imagenet_example


def photo_like_jpeg(rng: np.random.Generator, height: int, width: int, quality: int) -> bytes:
    """A JPEG of a smooth random colour field with pixel noise (compresses like a photo)."""
    coarse = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC))
    noisy = field.astype(np.int16) + rng.integers(-20, 21, (height, width, 3), dtype=np.int16)
    buf = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
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
) -> int:
    """Writes `num_images` photo-like JPEG records as `train-0000k-of-0000n`; returns bytes."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for shard in range(num_shards):
        path = out / f"train-{shard:05d}-of-{num_shards:05d}"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for i in range(shard, num_images, num_shards):
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
            alone, one thread.
        cores: CPU cores available to the process.
    """

    fused: PipelineRate
    baseline: PipelineRate
    decode_ms: tuple[float, float]
    cores: int

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

        fused_ms, base_ms = self.decode_ms
        return "\n".join(
            [
                f"training pipeline, {self.cores} cores (per core = images / CPU seconds used)",
                line("fused decode-and-crop (cvbench):", self.fused),
                line("decode whole image, then crop:", self.baseline),
                f"ratio fused / baseline: {self.ratio:.2f}x per core, {self.wall_ratio:.2f}x img/s",
                f"decode-and-crop step alone, one thread: fused {fused_ms:.2f} ms/img, "
                f"whole image {base_ms:.2f} ms/img ({base_ms / fused_ms:.2f}x)",
            ]
        )


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


def _decode_step_ms(data_dir: str | os.PathLike, images: int = 64, repeats: int = 4) -> tuple:
    """CPU ms per image of decode-and-random-crop, fused and whole-image, on one thread."""
    import tensorflow as tf

    from cvbench.data.preprocessing import decode_and_random_crop, decode_then_random_crop
    from cvbench.data.records import list_split_files
    from cvbench.data.tfrecord import iter_tfrecord

    encoded = []
    for path in list_split_files(data_dir, "train"):
        for record in iter_tfrecord(path):
            feature = tf.train.Example.FromString(record).features.feature
            encoded.append(tf.constant(feature["image/encoded"].bytes_list.value[0]))
            if len(encoded) == images:
                break
        if len(encoded) == images:
            break
    no_boxes = tf.zeros([0, 4])
    steps = [
        # The sum makes every pixel of the crop needed, so nothing is pruned away.
        tf.function(lambda b, s, d=d: tf.reduce_sum(tf.cast(d(b, no_boxes, s), tf.int32)))
        for d in (decode_and_random_crop, decode_then_random_crop)
    ]
    seconds = [0.0, 0.0]
    for r in range(repeats + 1):  # round 0 traces and warms up
        for k, step in enumerate(steps):  # alternate, so load changes hit both alike
            start = time.process_time()
            for i, data in enumerate(encoded):
                step(data, tf.constant([r, i], tf.int64))  # same seeds, same crops
            if r > 0:
                seconds[k] += time.process_time() - start
    return tuple(t / (repeats * len(encoded)) * 1e3 for t in seconds)


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
    from cvbench.data.preprocessing import preprocess_for_train, preprocess_for_train_reference

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
        _rate(fused), _rate(baseline), _decode_step_ms(data_dir), default_num_workers()
    )


def describe_records(num_images: int, total_bytes: int, height: int, width: int) -> str:
    """One line describing generated benchmark records."""
    return (
        f"{num_images} generated JPEGs {width}x{height}, "
        f"{format_bytes(total_bytes // max(1, num_images))} on average"
    )
