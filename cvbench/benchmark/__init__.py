"""Throughput and latency benchmarks of cvbench's models, beside their references.

- `benchmark_cvbench`: training or inference images/s of one cvbench model (the code path
  of `cvbench benchmark`); `benchmark_latency`: its inference latency percentiles.
- `run_suite` / `SuiteConfig`: cvbench beside keras.applications (plain `model.fit`) and
  torchvision (PyTorch AMP), training and inference, plus latency percentiles
  (`benchmarks/train_throughput.py`).
- `TrainStepRunner`, `make_forward`: Keras steps without a host sync per step.
- `measure_throughput`, `measure_latency`: the timing.

Nothing here imports TensorFlow on another Keras backend, nor PyTorch unless a torchvision
reference is asked for.
"""

from cvbench.benchmark.results import LatencyResult, ThroughputResult
from cvbench.benchmark.run import benchmark_cvbench, benchmark_latency, measure_latencies
from cvbench.benchmark.steps import TrainStepRunner, make_forward
from cvbench.benchmark.suite import SuiteConfig, SuiteResults, run_suite
from cvbench.benchmark.table import latency_table, throughput_table
from cvbench.benchmark.timing import Latency, Throughput, measure_latency, measure_throughput

__all__ = [
    "Latency",
    "LatencyResult",
    "SuiteConfig",
    "SuiteResults",
    "Throughput",
    "ThroughputResult",
    "TrainStepRunner",
    "benchmark_cvbench",
    "benchmark_latency",
    "latency_table",
    "make_forward",
    "measure_latencies",
    "measure_latency",
    "measure_throughput",
    "run_suite",
    "throughput_table",
]
