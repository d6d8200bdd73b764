"""Input pipeline throughput: cvbench's tf.data pipeline vs NVIDIA DALI on the CPU.

Prints images/s and images/s per core of the training and evaluation pipelines of both, on the
same records with the same recipe and threads, and the ratios cvbench / DALI CPU (the same as
`cvbench bench-input`). Without --data-dir it first
generates ImageNet-like JPEG records: `--source generated` (colour fields with pixel noise,
the default) or `--source photos` (random views of real photographs; see
`cvbench.benchmark.input_bench.sample_photos`).

    python benchmarks/input_pipeline.py [--data-dir DIR | --source photos] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cvbench.cli.imagenet import add_bench_arguments, run_bench


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bench_arguments(parser)
    return run_bench(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
