"""`cvbench build-imagenet`, `cvbench dali-index` and `cvbench bench-input`: thin wrappers over
`cvbench.data`."""

from __future__ import annotations

import argparse
import tempfile

from cvbench.cli.args import (
    image_side,
    non_negative_int,
    output_path,
    positive_int,
    seed_int,
    worker_count,
)
from cvbench.cli.errors import CLIError
from cvbench.data.image_io import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_PIXELS, parse_resize


def _resize(text: str) -> int | tuple[int, int]:
    try:
        return parse_resize(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `build-imagenet`."""
    parser.add_argument(
        "--raw-dir",
        required=True,
        help="raw images: train/<class>/*, optional validation/ or val/ (flat or class folders)",
    )
    parser.add_argument(
        "--output-dir", required=True, type=output_path, help="where the TFRecord shards go"
    )
    parser.add_argument("--train-shards", type=positive_int, default=1024)
    parser.add_argument("--val-shards", type=positive_int, default=128)
    parser.add_argument(
        "--resize",
        type=_resize,
        default=None,
        help="S: shorter side to S pixels keeping aspect (never upscaled); HxW: exactly HxW "
        "(NVIDIA's 352x352). Default: keep sizes",
    )
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images")
    parser.add_argument(
        "--workers", type=worker_count, default=None, help="worker processes (default: all cores)"
    )
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the shard shuffle")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a different data set in --output-dir"
    )
    parser.add_argument(
        "--val-labels",
        default=None,
        help="ground truth of a flat validation folder: the devkit's "
        "ILSVRC2012_validation_ground_truth.txt (meta.mat beside it), one class per line, "
        "or 'file class' lines",
    )
    parser.add_argument("--class-texts", default=None, help="'<class> <human-readable text>' lines")
    parser.add_argument("--boxes", default=None, help="bounding-box CSV: name,xmin,ymin,xmax,ymax")
    parser.add_argument("--train-dir", default=None, help="training folder (default RAW/train)")
    parser.add_argument(
        "--val-dir", default=None, help="validation folder (default RAW/validation or RAW/val)"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail (before writing anything) on a class folder without images, instead of "
        "keeping it as a class with 0 images and a warning",
    )
    add_max_pixels_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_max_pixels_argument(parser: argparse.ArgumentParser) -> None:
    """`--max-pixels` and `--max-image-bytes`, the image limits of the builders
    (`build-imagenet`, `build-coco`)."""
    parser.add_argument(
        "--max-pixels",
        type=positive_int,
        default=DEFAULT_MAX_PIXELS,
        help="skip (and list) images with more pixels than this, width x height read from "
        f"the header before decoding (default {DEFAULT_MAX_PIXELS:,}: 64 megapixels)",
    )
    parser.add_argument(
        "--max-image-bytes",
        type=positive_int,
        default=DEFAULT_MAX_IMAGE_BYTES,
        help="skip (and list) image files larger than this, checked before reading them "
        f"(default {DEFAULT_MAX_IMAGE_BYTES:,}: 256 MiB); FIFOs and devices are skipped too",
    )


def run_build(args: argparse.Namespace) -> int:
    """Handler of `build-imagenet`."""
    from cvbench.data.builders.imagenet_builder import build_imagenet

    summary = build_imagenet(  # a full disk is an OSError: one line, exit status 1
        args.raw_dir,
        args.output_dir,
        train_shards=args.train_shards,
        val_shards=args.val_shards,
        resize=args.resize,
        quality=args.quality,
        num_workers=args.workers,
        seed=args.seed,
        overwrite=args.overwrite,
        validation_labels=args.val_labels,
        class_texts=args.class_texts,
        boxes=args.boxes,
        train_dir=args.train_dir,
        validation_dir=args.val_dir,
        strict=args.strict,
        max_pixels=args.max_pixels,
        max_image_bytes=args.max_image_bytes,
        progress=not args.no_progress,
    )
    print(summary.format())
    return 0


def run_dali_index(args: argparse.Namespace) -> int:
    """Handler of `dali-index`: index files for the shards of DATA_DIR (every split)."""
    from cvbench.data.dali_index import write_indexes
    from cvbench.data.read.splits import every_split_files

    if not args.data_dir.strip():  # Path("") is the current folder: a mistake, not a choice
        raise CLIError("DATA_DIR is empty: name the folder of the shards (. for this one)")
    # A missing folder: exit status 2; a truncated shard (BadFileError) or an OSError: 1.
    # A link in place of DATA_DIR/idx (BadFileError): 1; a user's index file in the way or an
    # empty --index-dir (ValueError): 2, before any index is written.
    files = every_split_files(args.data_dir)
    summary = write_indexes(
        files,
        index_dir=args.index_dir,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    print(summary.format())
    return 0


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `bench-input` (also used by benchmarks/input_pipeline.py)."""
    parser.add_argument(
        "--data-dir",
        default=None,
        help="ImageNet-format TFRecords (train-* files); default: generate JPEGs (--source)",
    )
    parser.add_argument(
        "--source",
        choices=("generated", "photos"),
        default="generated",
        help="images to generate without --data-dir: colour fields with pixel noise "
        "(generated, the default) or random views of real photographs (photos)",
    )
    parser.add_argument("--num-images", type=positive_int, default=256)
    parser.add_argument("--image-height", type=image_side, default=375)
    parser.add_argument("--image-width", type=image_side, default=500)
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--image-size", type=image_side, default=224)
    parser.add_argument("--warmup-batches", type=non_negative_int, default=4)
    parser.add_argument("--batches", type=positive_int, default=20, help="timed batches per round")
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument(
        "--threads",
        type=worker_count,
        default=None,
        help="threads of each pipeline: tf.data's threadpool and DALI's num_threads (default: "
        "the cores available)",
    )
    parser.add_argument(
        "--data-backend",
        choices=("grain",),
        default=None,
        help="grain: also measure the TensorFlow-free grain pipeline (cvbench.data.grain) on "
        "the same records, in this process without worker processes (one core), with its "
        "ratio grain / tf.data per core",
    )


def run_bench(args: argparse.Namespace) -> int:
    """Handler of `bench-input`."""
    from cvbench.benchmark.input_bench import (
        describe_records,
        run_input_benchmark,
        write_benchmark_records,
    )
    from cvbench.utils.cpu import describe_cpu

    print(f"cpu: {describe_cpu()}")

    def measure(data_dir: str) -> None:
        result = run_input_benchmark(
            data_dir,
            batch_size=args.batch_size,
            image_size=args.image_size,
            warmup_batches=args.warmup_batches,
            batches=args.batches,
            rounds=args.rounds,
            threads=args.threads,
            grain=getattr(args, "data_backend", None) == "grain",
        )
        print(result.format())

    if args.data_dir is not None:
        print(f"records: {args.data_dir}")
        measure(args.data_dir)
        return 0
    with tempfile.TemporaryDirectory(prefix="cvbench-bench-input-") as tmp:
        size = {"height": args.image_height, "width": args.image_width}
        total = write_benchmark_records(tmp, num_images=args.num_images, source=args.source, **size)
        print("records: " + describe_records(args.num_images, total, **size, source=args.source))
        measure(tmp)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `build-imagenet`, `dali-index` and `bench-input`."""
    build = subparsers.add_parser(
        "build-imagenet",
        help="build ImageNet-format TFRecords from a folder-per-class image set",
        description="Build sharded TFRecords (train-00000-of-01024 ..., labels 1..N) from "
        "RAW/train/<class>/* and RAW/validation (flat with a label file, or class folders).",
    )
    add_build_arguments(build)
    build.set_defaults(func=run_build)
    index = subparsers.add_parser(
        "dali-index",
        help="write DALI index files (idx/<shard>.idx) for existing TFRecord shards",
        description="Write the index file DALI's TFRecord reader needs for every shard "
        "(<split>-NNNNN-of-NNNNN) of DATA_DIR, in DATA_DIR/idx/<shard>.idx (the format of "
        "DALI's tfrecord2idx); index files that match their shard are kept, stale ones "
        "cvbench wrote are rewritten, and a file cvbench did not write is never replaced.",
    )
    index.add_argument("data_dir", metavar="DATA_DIR", help="folder of the TFRecord shards")
    index.add_argument(
        "--index-dir",
        default=None,
        type=output_path,
        help="where the index files go (default DATA_DIR/idx)",
    )
    index.add_argument(
        "--overwrite", action="store_true", help="rewrite up-to-date indexes cvbench wrote"
    )
    index.add_argument("--no-progress", action="store_true", help="no progress bar")
    index.set_defaults(func=run_dali_index)
    bench = subparsers.add_parser(
        "bench-input",
        help="input pipeline images/s: cvbench's tf.data vs DALI on the CPU, training and "
        "evaluation, on the same records",
        description="Measure cvbench's tf.data pipeline and NVIDIA DALI's CPU pipeline (the "
        "same recipe, records and thread count) for training and evaluation: img/s, img/s "
        "per core (images / CPU seconds of the process), and the ratio cvbench / DALI CPU. "
        "DALI comes with pip install 'cvbench[dali]'; without it only tf.data is measured.",
    )
    add_bench_arguments(bench)
    bench.set_defaults(func=run_bench)
