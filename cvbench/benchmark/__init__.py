"""Throughput and latency benchmarks of cvbench's models: the code of `cvbench benchmark`.

- `benchmark_cvbench`: training or inference images/s of one cvbench model, timed in
  windows of steps by `measure_throughput` (the timing `Trainer.benchmark` uses too);
  `benchmark_latency`: its inference latency percentiles (`measure_latency` per call).
- `ThroughputResult` / `Throughput`, `LatencyResult` / `Latency`: what they return
  (`to_dict()` for JSON); `latency_table`: the latency percentiles as Markdown.
- `TrainStepRunner`, `make_forward`: Keras steps without a host sync per step.

The suite that measures cvbench beside keras.applications and torchvision lives outside the
package, in `benchmarks/` (`benchmarks/train_throughput.py`). Nothing here imports
TensorFlow on another Keras backend.
"""

from cvbench.benchmark.latency import Latency, measure_latency
from cvbench.benchmark.results import LatencyResult, ThroughputResult
from cvbench.benchmark.run import benchmark_cvbench, benchmark_latency, measure_latencies
from cvbench.benchmark.steps import TrainStepRunner, make_forward
from cvbench.benchmark.table import latency_table
from cvbench.training.throughput import Throughput, measure_throughput

__all__ = [
    "Latency",
    "LatencyResult",
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
]
