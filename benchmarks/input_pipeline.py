"""Training input pipeline throughput: crop fused into JPEG decoding vs decode-then-crop.

Prints images/s and images/s per core of both pipelines and their ratio, and the
decode-and-crop step alone (the same as `cvbench bench-input`). Without --data-dir it first
generates ImageNet-like JPEG records: `--source generated` (colour fields with pixel noise,
the default) or `--source photos` (random views of real photographs; see
`cvbench.data.input_bench.sample_photos`).

    python benchmarks/input_pipeline.py [--data-dir DIR | --source photos] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence

from cvbench.cli.imagenet import add_bench_arguments, run_bench
from cvbench.data.input_bench import (
    SOURCES,
    describe_records,
    run_input_benchmark,
    write_benchmark_records,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bench_arguments(parser)
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="generated",
        help="images to generate when there is no --data-dir (default: generated)",
    )
    args = parser.parse_args(argv)
    if args.data_dir is not None or args.source == "generated":
        return run_bench(args)
    with tempfile.TemporaryDirectory(prefix="cvbench-bench-input-") as tmp:
        size = {"height": args.image_height, "width": args.image_width}
        total = write_benchmark_records(tmp, num_images=args.num_images, source="photos", **size)
        print("records: " + describe_records(args.num_images, total, **size, source="photos"))
        result = run_input_benchmark(
            tmp,
            batch_size=args.batch_size,
            image_size=args.image_size,
            warmup_batches=args.warmup_batches,
            batches=args.batches,
            rounds=args.rounds,
        )
        print(result.format())
    return 0


if __name__ == "__main__":
    sys.exit(main())
