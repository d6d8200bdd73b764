"""ImageNet TFRecords -> NVIDIA DALI pipelines, with the recipe of `imagenet_dataset`.

`imagenet_dali_pipeline` builds a DALI `Pipeline` over the same ImageNet-format records as
`cvbench.data.read.imagenet.imagenet_dataset` (the TFRecord shards plus their DALI index files,
`cvbench.data.dali_index`), with the same recipe (`ImagePreprocessing`'s knobs):

* training: `fn.decoders.image_random_crop` (the crop chosen from `aspect_ratio_range`,
  `area_range`, `max_attempts`, decoding only the crop where the decoder can), bilinear
  resize to `image_size` (no antialiasing, as `tf.image.resize`), a random left-right flip,
  `(x - mean) / std` (or "inception" scaling) in `fn.crop_mirror_normalize`;
* evaluation: decode, shorter side to `round(image_size / crop_fraction)` (bilinear), the
  central `image_size` crop with the offsets rounded down as `preprocessing.central_crop`
  does, the same scaling.

Labels come out 0-based int32 (the stored label minus 1). `device="cpu"` decodes with
libjpeg-turbo on the CPU; `"mixed"` decodes with nvJPEG on the GPU (`device_id`, by default
the Horovod local rank) and runs the rest there.

The recipe differs from tf.data's in three places, none a knob (see docs/data.md):

* records' bounding boxes are not used: the crop is drawn on the whole image. Without boxes
  tf.data's `min_object_covered` (0.1) demands crops of at least that fraction of the image, so
  the DALI crop's area range starts at `max(area_range[0], min_object_covered)`; DALI draws
  area and aspect ratio with its own sampler (the ranges match, the distribution is DALI's);
* JPEGs are decoded by DALI's decoder: on the CPU libjpeg-turbo's accurate integer IDCT with
  chroma interpolation, the pixels of TensorFlow's `decode_jpeg(dct_method="INTEGER_ACCURATE")`
  (tests/data/dali/test_dali.py checks it), whatever `dct_method` says; TensorFlow's default fast
  IDCT differs from it by up to a few levels. nvJPEG ("mixed") has its own rounding;
* DALI resizes uint8 to uint8 (as NVIDIA's DALI scripts do: less memory traffic), so resized
  pixels are rounded to whole levels where TensorFlow keeps float32: up to half a level,
  1 / 57.12 = 0.0175 after normalization, on top of the two kernels' float differences.

Knobs DALI does not have here raise `ValueError`: `resize_method` other than "bilinear",
`eval_crop="crop_then_resize"`, `quantize_uint8`, `fancy_upscaling=False`.

`cvbench.data.dali.dataset.imagenet_dali_dataset` wraps the pipeline as batches with the
element structure and sharding of `imagenet_dataset`.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cvbench.data._distributed import resolve_shards
from cvbench.data.dali_index import format_entries, index_path, read_index
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.ranks import rank_seed
from cvbench.data.read.reader import rank_segments
from cvbench.data.read.spec import ReadSpec, read_spec
from cvbench.data.read.splits import list_split_files
from cvbench.utils.launch import current_launch

DEVICES = ("cpu", "mixed")
DTYPES = ("float32", "float16", "bfloat16")
EXTRA_HINT = (
    "NVIDIA DALI is not installed; install the extra: pip install 'cvbench[dali]' "
    "(nvidia-dali-cuda120>=2.4)"
)


def import_dali() -> Any:
    """`nvidia.dali`, or an ImportError naming the extra that installs it."""
    try:
        import nvidia.dali as dali
        import nvidia.dali.fn  # noqa: F401
        import nvidia.dali.tfrecord  # noqa: F401
        import nvidia.dali.types  # noqa: F401
    except ImportError as e:
        raise ImportError(f"{EXTRA_HINT}: {e}") from e
    return dali


def check_dali_preprocessing(preprocessing: ImagePreprocessing | None) -> ImagePreprocessing:
    """The recipe, or ValueError naming a knob this DALI pipeline does not implement."""
    p = ImagePreprocessing() if preprocessing is None else preprocessing
    if not isinstance(p, ImagePreprocessing):
        raise ValueError(f"preprocessing must be an ImagePreprocessing or None, got {p!r}")
    unsupported = {
        "resize_method": (p.resize_method, "bilinear"),
        "eval_crop": (p.eval_crop, "center_crop"),
        "quantize_uint8": (p.quantize_uint8, False),
        "fancy_upscaling": (p.fancy_upscaling, True),
    }
    for name, (value, supported) in unsupported.items():
        if value != supported:
            raise ValueError(
                f"the DALI pipeline supports only {name}={supported!r}, got {name}={value!r}; "
                "use the tf.data pipeline (--data-backend tf) for this recipe"
            )
    return p


@dataclass(frozen=True)
class RankRecords:
    """What one rank reads: files, the index file of each (listing only the rank's records),
    and the number of those records."""

    paths: list[str]
    index_paths: list[str]
    num_records: int


def _write_rank_index(folder: Path, number: int, entries: list) -> str:
    path = folder / f"{number:05d}.idx"
    path.write_text(format_entries(entries), encoding="ascii")
    return str(path)


def rank_records(
    files: list[str],
    *,
    training: bool,
    num_shards: int,
    shard_index: int,
    index_dir: str | os.PathLike | None,
    scratch: Path,
) -> RankRecords:
    """The records of one rank, with the sharding of `cvbench.data.read.reader`.

    Evaluation: the contiguous range `rank_segments` gives (every record exactly once across
    ranks). Training: files `r, r + R, ...` when there are at least as many files as ranks,
    else records `r, r + R, ...` of all files in file order (tf.data takes every R-th record
    of its interleaved stream instead: the same share, other records). Per-rank index files
    listing only those records are written to `scratch`.
    """
    entries = {path: read_index(path, index_dir) for path in files}
    if training and len(files) >= num_shards:
        mine = files[shard_index::num_shards]
        return RankRecords(
            mine,
            [str(index_path(p, index_dir)) for p in mine],
            sum(len(entries[p]) for p in mine),
        )
    if training:
        picked, number = [], 0
        for path in files:
            keep = [e for i, e in enumerate(entries[path], number) if i % num_shards == shard_index]
            number += len(entries[path])
            if keep:
                picked.append((path, keep))
    else:
        counts = [len(entries[p]) for p in files]
        picked = [
            (s.path, entries[s.path][s.skip : s.skip + s.take])
            for s in rank_segments(files, counts, num_shards, shard_index)
        ]
    scratch.mkdir(parents=True, exist_ok=True)
    index_paths = [_write_rank_index(scratch, n, kept) for n, (_, kept) in enumerate(picked)]
    return RankRecords([p for p, _ in picked], index_paths, sum(len(kept) for _, kept in picked))


def _local_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's GPU on its host: the launcher's local rank (`current_launch`, which a
    started Horovod refines), so a pipeline built before the Trainer starts Horovod under
    horovodrun or mpirun already reads onto its own GPU, not every rank onto GPU 0."""
    return current_launch(environ).local_rank


def dali_spec(spec: ReadSpec | None, *, split: str | None, **read: Any) -> ReadSpec:
    """The `ReadSpec` of a DALI reader (`read_spec` with DALI's defaults: image size 224, a
    shuffle buffer of 10 000 records), refusing what DALI does not do: skipping corrupt
    records, and a single pass (its readers always repeat)."""
    spec = read_spec(spec, split=split, **read).with_defaults(image_size=224, shuffle_buffer=10_000)
    spec.require_split()
    if spec.skip_corrupt:
        raise ValueError("skip_corrupt=True is not available with DALI, got skip_corrupt=True")
    if not spec.repeat:
        raise ValueError("DALI's readers always repeat, got repeat=False")
    return spec


def _check_args(num_threads: int, device: str, dtype: str) -> None:
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


def _train_images(dali: Any, encoded: Any, image_size: int, device: str, p: Any) -> tuple:
    """Random-resized crop (decoding only the crop where the decoder can) and the flip flag."""
    fn, types = dali.fn, dali.types
    images = fn.decoders.image_random_crop(
        encoded,
        device=device,
        output_type=types.RGB,
        random_aspect_ratio=list(p.aspect_ratio_range),
        random_area=[max(p.area_range[0], p.min_object_covered), p.area_range[1]],
        num_attempts=p.max_attempts,
    )
    images = fn.resize(
        images,
        resize_x=image_size,
        resize_y=image_size,
        interp_type=types.INTERP_LINEAR,
        antialias=False,
    )
    return images, fn.random.coin_flip(probability=0.5) if p.flip else 0


def _eval_images(dali: Any, encoded: Any, image_size: int, device: str, p: Any) -> Any:
    """Decode, shorter side to `eval_resize_size`, central crop (offsets rounded down, as
    `preprocessing.central_crop`)."""
    fn, types = dali.fn, dali.types
    images = fn.decoders.image(encoded, device=device, output_type=types.RGB)
    images = fn.resize(
        images,
        resize_shorter=p.eval_resize_size(image_size),
        interp_type=types.INTERP_LINEAR,
        antialias=False,
    )
    shape = images.shape(dtype=types.INT32)
    anchor = fn.stack(shape[0] - image_size, shape[1] - image_size) // 2
    return fn.slice(
        images, anchor, [image_size, image_size], axes=[0, 1], out_of_bounds_policy="error"
    )


def _graph(
    dali: Any,
    records: RankRecords,
    *,
    training: bool,
    batch_size: int,
    image_size: int,
    device: str,
    p: ImagePreprocessing,
    dtype: str,
    shuffle_buffer: int,
) -> tuple:
    """The pipeline's graph: reader -> images, labels (0-based int32) [, weights]."""
    fn, types, tfrec = dali.fn, dali.types, dali.tfrecord
    inputs = fn.readers.tfrecord(
        path=records.paths,
        index_path=records.index_paths,
        features={
            "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
            "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
        },
        random_shuffle=training and shuffle_buffer > 1,
        initial_fill=max(1, shuffle_buffer),
        pad_last_batch=not training,
        name="reader",
    )
    encoded = inputs["image/encoded"]
    if training:
        images, mirror = _train_images(dali, encoded, image_size, device, p)
    else:
        images, mirror = _eval_images(dali, encoded, image_size, device, p), 0
    if p.input_scaling == "inception":
        mean, std = [127.5] * 3, [127.5] * 3  # x / 127.5 - 1
    else:
        mean, std = list(p.mean), list(p.std)
    images = fn.crop_mirror_normalize(
        images,
        dtype=types.FLOAT16 if dtype == "float16" else types.FLOAT,
        output_layout="HWC",
        mean=mean,
        std=std,
        mirror=mirror,
    )
    labels = fn.cast(fn.reshape(inputs["image/class/label"], shape=[]) - 1, dtype=types.INT32)
    if training:
        return images, labels
    n = records.num_records

    def weights(info: Any) -> np.ndarray:
        first = info.iteration * batch_size
        return (np.arange(first, first + batch_size) < n).astype(np.float32)

    return images, labels, fn.external_source(source=weights, batch=True, batch_info=True)


def _records_of_rank(
    data_dir: str | os.PathLike,
    spec: ReadSpec,
    file_pattern: str | None,
    index_dir: str | os.PathLike | None,
) -> tuple[RankRecords, tempfile.TemporaryDirectory, int | None]:
    """This rank's records of `spec.split`, the scratch folder of their per-rank index files
    (to live as long as the pipeline) and the rank's seed (`rank_seed`).

    Raises:
        ValueError: a rank without records.
    """
    num_shards, shard_index = resolve_shards(spec.num_shards, spec.shard_index)
    files = list_split_files(data_dir, spec.split, file_pattern)
    scratch = tempfile.TemporaryDirectory(prefix="cvbench-dali-")
    records = rank_records(
        files,
        training=spec.training,
        num_shards=num_shards,
        shard_index=shard_index,
        index_dir=index_dir,
        scratch=Path(scratch.name),
    )
    if records.num_records == 0:
        scratch.cleanup()
        raise ValueError(
            f"rank {shard_index} of {num_shards} has no records of {spec.split!r} in {data_dir}"
        )
    return records, scratch, rank_seed(spec.seed, shard_index)


def _built_pipeline(
    dali: Any,
    records: RankRecords,
    spec: ReadSpec,
    p: ImagePreprocessing,
    num_threads: int,
    device: str,
    device_id: int | None,
    seed: int | None,
) -> Any:
    """`_graph` as a built `dali.Pipeline`; for "mixed" on `device_id`, by default this
    process's GPU (`_local_rank`)."""
    gpu = None if device != "mixed" else _local_rank() if device_id is None else device_id
    pipe = dali.Pipeline(
        batch_size=spec.batch_size,
        num_threads=num_threads,
        device_id=gpu,
        seed=None if seed is None else seed % (2**31),
    )
    with pipe:
        pipe.set_outputs(
            *_graph(
                dali,
                records,
                training=spec.training,
                batch_size=spec.batch_size,
                image_size=spec.image_size,
                device=device,
                p=p,
                dtype=spec.dtype,
                shuffle_buffer=spec.shuffle_buffer,
            )
        )
    pipe.build()
    return pipe


def imagenet_dali_pipeline(
    data_dir: str | os.PathLike,
    split: str | None = None,
    *,
    spec: ReadSpec | None = None,
    num_threads: int,
    device: str = "cpu",
    preprocessing: ImagePreprocessing | None = None,
    index_dir: str | os.PathLike | None = None,
    device_id: int | None = None,
    file_pattern: str | None = None,
    **read: Any,
) -> Any:
    """A built DALI pipeline over ImageNet-format TFRecords (the recipe of `imagenet_dataset`).

    Args:
        data_dir: directory of the TFRecord shards.
        split: 'train', 'validation' (any `<split>-NNNNN-of-NNNNN` files); None: `spec.split`.
        spec: the reading arguments (`ReadSpec`). Training: random crop and flip, shuffled
            reading; evaluation: resize, central crop, the rank's records in order, the last
            batch padded with repeats of the last record. The image size defaults to 224;
            `seed` is the pipeline's random seed (crop, flip, shuffle), derived per rank as
            `reader.rank_seed` (None: a random one); `dtype` is "float32", "float16", or
            "bfloat16" (the pipeline gives float32 then; the dataset wrapper casts);
            `shuffle_buffer` (default 10 000) is the reader's shuffle buffer in records, 1:
            file order. DALI has no corrupt-record policy and always repeats: `skip_corrupt`
            must be False and `repeat` True.
        num_threads: DALI CPU worker threads.
        device: "cpu" (libjpeg-turbo) or "mixed" (nvJPEG on the GPU).
        preprocessing: the recipe's knobs; None: `ImagePreprocessing()` (NVIDIA's ResNet-50).
        index_dir: the folder of the shards' index files; default `data_dir/idx`.
        device_id: the GPU for "mixed"; default this process's local rank on its host
            (`cvbench.utils.launch.current_launch`: horovodrun's or MPI's, 0 for one process).
        file_pattern: a glob (relative to `data_dir`) instead of the split's names.
        **read: `ReadSpec` fields replacing the spec's (or making it, without `spec`).

    Returns:
        A built `nvidia.dali.Pipeline` whose `run()` gives `(images, labels)` (training) or
        `(images, labels, weights)` (evaluation; weights 1.0 for the rank's records, 0.0 for
        padding), images [batch, size, size, 3] HWC, labels [batch] int32. It has the extra
        attribute `cvbench_num_records`: the records this rank reads.

    Raises:
        ImportError: DALI is not installed (names the extra).
        FileNotFoundError: no data or no index file (names it and `cvbench dali-index`).
        ValueError: bad arguments, a recipe knob DALI does not implement (named), or a rank
            without records (`imagenet_dali_dataset` gives such an evaluation rank padding
            batches instead).
    """
    spec = dali_spec(spec, split=split, **read)
    _check_args(num_threads, device, spec.dtype)
    p = check_dali_preprocessing(preprocessing)
    dali = import_dali()
    records, scratch, seed = _records_of_rank(data_dir, spec, file_pattern, index_dir)
    pipe = _built_pipeline(dali, records, spec, p, num_threads, device, device_id, seed)
    pipe.cvbench_num_records = records.num_records
    weakref.finalize(pipe, scratch.cleanup)  # the per-rank index files live as long as it
    return pipe
