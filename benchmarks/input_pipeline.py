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
from collections.abc import Sequence

from cvbench.cli.imagenet import add_bench_arguments, run_bench


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bench_arguments(parser)
    return run_bench(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
