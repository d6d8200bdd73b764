"""Training input pipeline throughput: crop fused into JPEG decoding vs decode-then-crop.

Prints images/s and images/s per core of both pipelines and their ratio (the same as
`cvbench bench-input`). Without --data-dir it generates ImageNet-like JPEG records first.

    python benchmarks/input_pipeline.py [--data-dir DIR] [--batch-size 64] [--rounds 3]
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
