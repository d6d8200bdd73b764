"""The benchmark suite of `benchmarks/train_throughput.py`, kept out of the cvbench package.

cvbench beside keras.applications (plain `model.fit` / `model.predict`) and torchvision
(PyTorch AMP), training and inference, plus latency percentiles, through the same functions
as `cvbench benchmark` (`cvbench.benchmark`):

- `suite`: `SuiteConfig`, `run_suite`, `SuiteResults` (the order, time budget, variants);
- `reference`: the references, built and run as their users do;
- `torch_workload`: torchvision's models in PyTorch AMP (imports neither Keras nor cvbench);
- `workload_process`: a workload in a child process of its own (torchvision's);
- `table`: the throughput table with the ratios;
- `environment`: where a run ran (versions, devices, load).
- `op_profile`: TensorFlow's profile of a step summed by operation type, beside keras.applications'.

`benchmarks/train_throughput.py` imports it by putting its own folder on `sys.path`.
"""

from .environment import describe_environment
from .suite import SuiteConfig, SuiteResults, run_suite
from .table import throughput_table

__all__ = ["SuiteConfig", "SuiteResults", "describe_environment", "run_suite", "throughput_table"]
