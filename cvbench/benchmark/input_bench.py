"""Input pipeline benchmark: cvbench's tf.data pipeline against NVIDIA DALI on the CPU (and
grain, `run_input_benchmark(grain=True)`).

On the same ImageNet-format records, with the same recipe (`ImagePreprocessing()`, NVIDIA's
ResNet-50 v1.5) and the same number of threads, `run_input_benchmark` measures four pipelines:
`imagenet_dataset` and `imagenet_dali_dataset(device="cpu")`, each for training (random
resized crop, flip, normalize, batch) and evaluation (resize, central crop, normalize). Rounds
alternate between them and the median round is reported, which keeps other load on the machine
from favouring one side. Throughput is given per wall-clock second and per CPU-second used by
the process ("per core"; DALI's worker threads are threads of this process), the latter being
the fair figure on a machine shared with other work; the ratio cvbench / DALI CPU is printed
for both. Without DALI installed only the tf.data rows are measured.

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

from cvbench.data.builders.sharded_writer import format_bytes
from cvbench.data.tfrecord import imagenet_example, masked_crc32c
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


def tfrecord_frame(record: bytes) -> bytes:
    """`record` in TFRecord framing (length, its masked CRC32C, the data, its masked CRC32C),
    as `tf.io.TFRecordWriter` writes it, without TensorFlow (`zlib.crc32` is no CRC32C, so
    the data's checksum is computed by the pure-Python table: ~10 ms per 80 KiB).

    Example:
        >>> frame = tfrecord_frame(b"abc")
        >>> len(frame), frame[:8] == (3).to_bytes(8, "little")
        (19, True)
    """
    import struct

    length = struct.pack("<Q", len(record))
    return b"".join(
        (
            length,
            struct.pack("<I", masked_crc32c(length)),
            record,
            struct.pack("<I", masked_crc32c(record)),
        )
    )


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
        num_shards: files (at most `num_images`: no shard is empty).
        seed: makes the images reproducible.
        source: `"generated"` (`photo_like_jpeg`) or `"photos"` (`photo_view_jpeg` of the
            `sample_photos`, taken in turn).

    No TensorFlow needed: the records are framed here (`tfrecord_frame`), so a machine
    without it (a JAX GPU machine feeding grain) makes them too.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    rng = np.random.default_rng(seed)
    photos = list(sample_photos().values()) if source == "photos" else []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # As the builders: no empty shard (the readers refuse a 0-byte one as a truncated copy).
    num_shards = max(1, min(num_shards, num_images))
    total = 0
    for shard in range(num_shards):
        path = out / f"train-{shard:05d}-of-{num_shards:05d}"
        with open(path, "wb") as writer:
            for i in range(shard, num_images, num_shards):
                if photos:
                    data = photo_view_jpeg(rng, photos[i % len(photos)], height, width, quality)
                else:
                    data = photo_like_jpeg(rng, height, width, quality)
                total += len(data)
                example = imagenet_example(
                    encoded=data,
                    height=height,
                    width=width,
                    label=1 + i % 10,
                    synset=f"class{i % 10}",
                    text=f"class {i % 10}",
                    filename=f"bench_{i}.JPEG",
                )
                writer.write(tfrecord_frame(example))
    return total


@dataclass(frozen=True)
class PipelineRate:
    """Throughput of one pipeline (median over rounds).

    Attributes:
        images_per_s: images per wall-clock second, all cores together.
        images_per_cpu_s: images per second of CPU time used by this process (user + system,
            all threads, DALI's included): the throughput of one fully used core. Unlike the
            wall-clock figure it is not lowered by other programs competing for the cores.
        rounds: (images_per_s, images_per_cpu_s) of every round.
    """

    images_per_s: float
    images_per_cpu_s: float
    rounds: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Comparison:
    """cvbench's tf.data pipeline against DALI on the CPU, one mode (training or evaluation).

    Attributes:
        mode: "training" or "evaluation".
        tf_data: `imagenet_dataset`'s rate.
        dali_cpu: `imagenet_dali_dataset(device="cpu")`'s rate; None when DALI is missing.
    """

    mode: str
    tf_data: PipelineRate
    dali_cpu: PipelineRate | None
    grain: PipelineRate | None = None

    @property
    def grain_ratio(self) -> float | None:
        """grain / tf.data images per CPU-second (per core); None when grain was not run."""
        if self.grain is None:
            return None
        return self.grain.images_per_cpu_s / self.tf_data.images_per_cpu_s

    @property
    def ratio(self) -> float | None:
        """tf.data / DALI CPU images per CPU-second (per core)."""
        if self.dali_cpu is None:
            return None
        return self.tf_data.images_per_cpu_s / self.dali_cpu.images_per_cpu_s

    @property
    def wall_ratio(self) -> float | None:
        """tf.data / DALI CPU images per wall-clock second."""
        if self.dali_cpu is None:
            return None
        return self.tf_data.images_per_s / self.dali_cpu.images_per_s


@dataclass(frozen=True)
class InputBenchResult:
    """The training and evaluation pipelines of both backends on the same records.

    Attributes:
        training: the training pipelines (random-resized crop, flip, normalize).
        evaluation: the evaluation pipelines (resize, central crop, normalize).
        threads: threads each backend used (tf.data's threadpool, DALI's `num_threads`).
        cores: CPU cores available to the process.
        dali_missing: why DALI was not measured (its import error), or None.
    """

    training: Comparison
    evaluation: Comparison
    threads: int
    cores: int
    dali_missing: str | None = None

    def format(self) -> str:
        """The lines the benchmark prints."""

        def row(mode: str, name: str, rate: PipelineRate) -> str:
            return f"{mode:11s} {name:18s} {rate.images_per_s:8.1f} {rate.images_per_cpu_s:13.1f}"

        lines = [
            f"same records and recipe, {self.threads} threads each, {self.cores} cores "
            "(per core = images / CPU seconds used)",
            f"{'pipeline':11s} {'backend':18s} {'img/s':>8s} {'img/s per core':>13s}",
        ]
        for c in (self.training, self.evaluation):
            lines.append(row(c.mode, "tf.data (cvbench)", c.tf_data))
            if c.dali_cpu is not None:
                lines.append(row(c.mode, "DALI CPU", c.dali_cpu))
            if c.grain is not None:
                lines.append(row(c.mode, "grain (1 process)", c.grain))
        if self.training.grain is not None:
            parts = [f"{c.mode} {c.grain_ratio:.2f}x" for c in (self.training, self.evaluation)]
            lines.append("ratio grain / tf.data per core: " + ", ".join(parts))
        if self.dali_missing is not None:
            lines.append(f"DALI CPU: not measured ({self.dali_missing})")
            return "\n".join(lines)
        parts = [
            f"{c.mode} {c.ratio:.2f}x per core ({c.wall_ratio:.2f}x img/s)"
            for c in (self.training, self.evaluation)
        ]
        lines.append("ratio cvbench / DALI CPU: " + ", ".join(parts))
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


class _Endless:
    """The batches of `make()`'s one-pass pipelines, one pass after another, without end."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __iter__(self) -> Any:
        while True:
            yield from self.make()


class _EndlessDali:
    """DALI evaluation batches without end (the reader pads each pass's last batch and starts
    again), converted to NumPy as `imagenet_dali_dataset`'s batches are."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __iter__(self) -> Any:
        from cvbench.data.dali.dataset import to_numpy

        pipe = self.make()
        while True:
            yield tuple(to_numpy(o) for o in pipe.run())


def run_input_benchmark(
    data_dir: str | os.PathLike,
    *,
    batch_size: int = 64,
    image_size: int = 224,
    warmup_batches: int = 4,
    batches: int = 20,
    rounds: int = 3,
    shuffle_buffer: int = 256,
    threads: int | None = None,
    split: str = "train",
    grain: bool = False,
) -> InputBenchResult:
    """Measures tf.data and DALI CPU, training and evaluation, on the records of `split`.

    The pipelines alternate within each round; each is built afresh per round, warmed up,
    then timed; the median round is reported. All run the default recipe
    (`ImagePreprocessing()`) on the same files, with `threads` threads each: tf.data's
    private threadpool and DALI's `num_threads`. DALI's index files are written to a temporary
    folder, so `data_dir` is only read; evaluation streams repeat the records (`_Pipelines`).

    Args:
        data_dir: ImageNet-format TFRecords.
        batch_size: images per batch.
        image_size: output size.
        warmup_batches: batches read before timing each round.
        batches: timed batches per round.
        rounds: alternating rounds per pipeline; the median is reported.
        shuffle_buffer: training: records in the shuffle buffer (both backends).
        threads: threads per backend; None: the cores available (tf.data's default).
        split: the split whose files are read.
        grain: also measure `imagenet_grain_dataset` (no TensorFlow) on the same records:
            in this process, without worker processes (`num_workers=0`), so that its CPU
            seconds are this process' as the others' are: its img/s is one core's, its
            per-core figure comparable with theirs.

    Returns:
        An `InputBenchResult` (DALI's rates None, with the reason, when DALI is missing).
    """
    import tempfile

    cores, threads = _checked(
        batches=batches, rounds=rounds, batch_size=batch_size, threads=threads
    )
    dali_missing = _dali_missing()
    timing = _Timing(warmup_batches, batches, batch_size)
    with tempfile.TemporaryDirectory(prefix="cvbench-bench-idx-") as index_dir:
        pipelines = _Pipelines(
            data_dir, split, batch_size, image_size, threads, shuffle_buffer, index_dir
        )
        backends = pipelines.backends(grain=grain, dali=dali_missing is None)
        measured = _alternate(backends, rounds, timing)
    return InputBenchResult(
        _comparison(measured, training=True),
        _comparison(measured, training=False),
        threads,
        cores,
        dali_missing,
    )


def _checked(*, batches: int, rounds: int, batch_size: int, threads: int | None) -> tuple:
    """`(cores, threads)`: the cores available and the threads per backend (None: the cores).

    Raises:
        ValueError: a count below 1 (named).
    """
    for name, value in (("batches", batches), ("rounds", rounds), ("batch_size", batch_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    cores = default_num_workers()
    threads = cores if threads is None else threads
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return cores, threads


def _dali_missing() -> str | None:
    """Why DALI cannot be measured (its import error), or None when it can."""
    try:
        from cvbench.data.dali.pipeline import import_dali

        import_dali()
    except ImportError as e:
        return str(e)
    return None


@dataclass(frozen=True)
class _Timing:
    """How each pipeline is timed in a round: batches read first, then batches timed."""

    warmup_batches: int
    batches: int
    batch_size: int


@dataclass(frozen=True)
class _Pipelines:
    """Makes each backend's training or evaluation pipeline on the same records and recipe.

    Evaluation streams repeat the records (tf.data `.repeat()`, grain pass after pass, DALI's
    reader wraps around), so any number of batches can be timed on a few records.
    """

    data_dir: str | os.PathLike
    split: str
    batch_size: int
    image_size: int
    threads: int
    shuffle_buffer: int
    index_dir: str  # DALI's index files (a temporary folder: data_dir is only read)

    @property
    def common(self) -> dict:
        return dict(
            batch_size=self.batch_size, image_size=self.image_size, num_shards=1, shard_index=0
        )

    def backends(self, *, grain: bool, dali: bool) -> list[tuple[str, Any]]:
        """`(name, make)` of the backends to measure, `make(training)` a fresh pipeline."""
        backends = [("tf", self.tf_data)]
        if grain:
            backends.append(("grain", self.grain))
        if dali:
            from cvbench.data.dali_index import write_indexes
            from cvbench.data.read.reader import list_split_files

            write_indexes(list_split_files(self.data_dir, self.split), index_dir=self.index_dir)
            backends.append(("dali", self.dali))
        return backends

    def tf_data(self, training: bool) -> Any:
        import tensorflow as tf

        from cvbench.data.read.imagenet import imagenet_dataset

        options = tf.data.Options()
        options.threading.private_threadpool_size = self.threads
        if training:
            ds = imagenet_dataset(
                self.data_dir,
                self.split,
                training=True,
                shuffle_buffer=self.shuffle_buffer,
                **self.common,
            )
        else:
            ds = imagenet_dataset(self.data_dir, self.split, training=False, **self.common)
            ds = ds.repeat()
        return ds.with_options(options)

    def grain(self, training: bool) -> Any:
        from cvbench.data.grain.dataset import imagenet_grain_dataset

        read = dict(self.common, training=training, seed=0)
        if training:
            return imagenet_grain_dataset(self.data_dir, self.split, **read)
        return _Endless(lambda: imagenet_grain_dataset(self.data_dir, self.split, **read))

    def dali(self, training: bool) -> Any:
        from cvbench.data.dali.dataset import imagenet_dali_dataset
        from cvbench.data.dali.pipeline import imagenet_dali_pipeline

        kw = dict(self.common, num_threads=self.threads, device="cpu", index_dir=self.index_dir)
        if training:
            return imagenet_dali_dataset(
                self.data_dir, self.split, training=True, shuffle_buffer=self.shuffle_buffer, **kw
            )
        return _EndlessDali(
            lambda: imagenet_dali_pipeline(self.data_dir, self.split, training=False, **kw)
        )


def _alternate(
    backends: list[tuple[str, Any]], rounds: int, timing: _Timing
) -> dict[tuple[bool, str], list[tuple[float, float]]]:
    """`(wall, CPU)` rates of every pipeline in every round, the pipelines alternating within
    each round (other load on the machine then favours none), each built afresh."""
    measured: dict[tuple[bool, str], list] = {}
    for _ in range(rounds):
        for training in (True, False):
            for name, make in backends:
                rate = _measure(
                    make(training), timing.warmup_batches, timing.batches, timing.batch_size
                )
                measured.setdefault((training, name), []).append(rate)
    return measured


def _comparison(measured: dict, *, training: bool) -> Comparison:
    dali_rounds = measured.get((training, "dali"))
    grain_rounds = measured.get((training, "grain"))
    return Comparison(
        "training" if training else "evaluation",
        _rate(measured[(training, "tf")]),
        _rate(dali_rounds) if dali_rounds else None,
        _rate(grain_rounds) if grain_rounds else None,
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
