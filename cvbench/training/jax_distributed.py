"""Data parallelism on the JAX backend: `keras.distribution.DataParallel` over every device of
every process (`jax.distributed`).

`JaxDataParallel` is the Trainer's `Distribution` on JAX. Its ranks are processes (rank =
`jax.process_index()`, size = `jax.process_count()`): each process reads its own shard of the
records, as a Horovod rank does, and feeds its per-process batch, which Keras turns into one
global array sharded on the batch axis over all devices (`jax.make_array_from_process_local_data`).
Model, optimizer and metric variables are created inside the distribution's scope, replicated
on every device. Global batch = per-process batch x processes; each device gets the
per-process batch / local devices.

What follows from one jitted step over a global array (GSPMD), instead of Horovod's
allreduce inside the optimizer:

- gradients are those of the mean loss over the global batch, i.e. averaged over devices
  and processes; nothing wraps the optimizer;
- whole-step skipping (`TrainingModel`) decides on those global gradients: a non-finite
  gradient on one device skips the step on all;
- batch normalization normalizes with the statistics of the *global* batch (the mean and
  variance are reductions over the sharded batch axis), so 4 devices x B rows train as one
  device x 4B rows do; Horovod ranks normalize with their own B rows;
- evaluation metric states are global too (the padded evaluation batches, weight 0 for the
  padding, have the same count on every process): `global_steps` tells the Trainer not to
  sum them over ranks again.

Host-side collectives between steps (broadcasts, sums of counts, stop flags) go through
`jax.experimental.multihost_utils`; float64 values travel as their bits (uint32 pairs),
since JAX without x64 would round them to float32.

Multi-process: `keras.distribution.initialize()` from `KERAS_DISTRIBUTION_JOB_ADDRESSES`
(the coordinator's `host:port` first), `KERAS_DISTRIBUTION_NUM_PROCESSES` and
`KERAS_DISTRIBUTION_PROCESS_ID`, or from the arguments, before anything else touches JAX.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from contextlib import AbstractContextManager

import keras
import numpy as np

from cvbench.training.distributed import Distribution

#: What `keras.distribution.initialize()` reads.
ENV_VARS = (
    "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "KERAS_DISTRIBUTION_PROCESS_ID",
)


def launched_for_jax() -> bool:
    """Whether the `KERAS_DISTRIBUTION_*` variables ask for several processes."""
    return int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1") or 1) > 1


def _initialize(job_addresses: str | None, num_processes: int | None, process_id: int | None):
    import jax

    if jax.distributed.is_initialized():
        return
    missing = [
        name
        for name, value in zip(ENV_VARS, (job_addresses, num_processes, process_id), strict=True)
        if value is None and name not in os.environ
    ]
    if missing:
        raise ValueError(
            f"several JAX processes need {', '.join(missing)} (or the Trainer's arguments): "
            "the coordinator's host:port, the process count and this process' id"
        )
    try:
        keras.distribution.initialize(job_addresses, num_processes, process_id)
    except RuntimeError as e:
        if "must be called before" not in str(e):
            raise
        raise RuntimeError(
            "several JAX processes: jax.distributed must start before anything runs on JAX "
            "(a model, a metric or an array made before the Trainer starts it); call "
            "keras.distribution.initialize() at the top of the script, or make them after "
            "the Trainer"
        ) from e


class JaxDataParallel(Distribution):
    """Data-parallel training over the devices of one or several JAX processes.

    Create it (or the Trainer) before anything else runs JAX computations when several
    processes are asked for: `jax.distributed` must start first.

    Args:
        devices: devices per process (default: all local devices); the first N of each.
        job_addresses: the coordinator's `host:port` (default `KERAS_DISTRIBUTION_JOB_ADDRESSES`).
        num_processes: processes (default `KERAS_DISTRIBUTION_NUM_PROCESSES`, else 1).
        process_id: this process' id (default `KERAS_DISTRIBUTION_PROCESS_ID`).

    Raises:
        ValueError: the backend is not JAX; a bad device count; a multi-process setting
            missing its coordinator or id.
    """

    name = "jax"
    #: The compiled steps see the global batch: metric states are already global.
    global_steps = True

    def __init__(
        self,
        *,
        devices: int | None = None,
        job_addresses: str | None = None,
        num_processes: int | None = None,
        process_id: int | None = None,
    ) -> None:
        if keras.config.backend() != "jax":
            raise ValueError(
                f"JAX data parallelism needs KERAS_BACKEND=jax, got {keras.config.backend()!r}"
            )
        processes = num_processes
        if processes is None:
            processes = int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1") or 1)
        if processes > 1:
            _initialize(job_addresses, num_processes, process_id)
        import jax

        self._jax = jax
        self.rank = jax.process_index()
        self.size = jax.process_count()
        local = jax.local_device_count()
        if devices is not None and (not isinstance(devices, int) or not 1 <= devices <= local):
            raise ValueError(
                f"devices must be an int from 1 to the {local} local devices, got {devices!r}"
            )
        self.local_devices = devices or local
        chosen = []
        for process in range(self.size):
            mine = [d for d in jax.devices() if d.process_index == process]
            chosen += sorted(mine, key=lambda d: d.id)[: self.local_devices]
        self.devices = chosen
        self.keras_distribution = keras.distribution.DataParallel(
            devices=[f"{d.platform}:{d.id}" for d in chosen], auto_shard_dataset=False
        )

    @property
    def num_devices(self) -> int:
        """Devices over all processes."""
        return len(self.devices)

    def scope(self) -> AbstractContextManager:
        """Keras' distribution scope: variables made in it are replicated, steps run in it
        take this process' batch as its slice of the global batch."""
        return self.keras_distribution.scope()

    def adopt_variables(self, variables: Sequence[keras.Variable]) -> None:
        """Replicates the variables of a model built outside `scope()` (e.g. loaded from a
        file), so that one jitted step can take them with the others."""
        for variable in variables:
            if getattr(variable, "_layout", None) is None:
                # Keras' JAX variable lays out what it is assigned by its `_layout`.
                variable._layout = self.keras_distribution.get_variable_layout(variable)
                variable.assign(keras.ops.convert_to_numpy(variable.value))

    def check_batch(self, batch_size: int) -> None:
        """Raises `ValueError` unless `batch_size` (per process) splits over the devices."""
        if batch_size % self.local_devices:
            raise ValueError(
                f"the batch of {batch_size} per process does not split over its "
                f"{self.local_devices} devices: pass a multiple of {self.local_devices}"
            )

    # ------------------------------------------------------------ host collectives
    def _gather(self, values: np.ndarray) -> np.ndarray:
        """`values` of every process, stacked on a new first axis (float64 kept exact)."""
        from jax.experimental import multihost_utils

        values = np.ascontiguousarray(values, np.float64)
        bits = values.reshape(-1).view(np.uint32)
        gathered = np.asarray(multihost_utils.process_allgather(bits, tiled=False))
        return gathered.view(np.float64).reshape((self.size, *values.shape))

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum over processes (float64)."""
        if self.size == 1:
            return np.asarray(values, np.float64)
        return self._gather(values).sum(axis=0)

    def allreduce_mean(self, values: np.ndarray) -> np.ndarray:
        """Mean over processes (float64)."""
        return self.allreduce_sum(values) / self.size

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        """Maximum over processes (float64)."""
        if self.size == 1:
            return np.asarray(values, np.float64)
        return self._gather(values).max(axis=0)

    def broadcast_object(self, obj):
        """Process 0's `obj` on every process (pickled)."""
        if self.size == 1:
            return obj
        from jax.experimental import multihost_utils

        data = np.frombuffer(pickle.dumps(obj), np.uint8) if self.rank == 0 else None
        length = int(
            multihost_utils.broadcast_one_to_all(np.int32(0 if data is None else len(data)))
        )
        buffer = np.zeros(length, np.uint8) if data is None else data
        buffer = np.asarray(multihost_utils.broadcast_one_to_all(buffer))
        return pickle.loads(buffer.astype(np.uint8).tobytes())

    def broadcast_variables(self, variables: Sequence[keras.Variable]) -> None:
        """Nothing to do: variables are replicated global arrays, one value on every device
        and process (seeded alike, restored alike)."""
