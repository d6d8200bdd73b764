"""The benchmark suite is the package `throughput_suite` in `benchmarks/`, outside cvbench:
its folder goes on `sys.path`, as `benchmarks/train_throughput.py` puts it there."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
