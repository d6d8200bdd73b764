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

Multi-process: `jax.distributed` starts (as `keras.distribution.initialize()` would) from
`KERAS_DISTRIBUTION_JOB_ADDRESSES` (the coordinator's `host:port` first; else JAX's own
`JAX_COORDINATOR_ADDRESS`), `KERAS_DISTRIBUTION_NUM_PROCESSES` and
`KERAS_DISTRIBUTION_PROCESS_ID`, or from the arguments, before anything else touches JAX. The
wait for the coordinator is bounded and said (`wait_for_coordinator`): a line at once, one
every `PROGRESS_EVERY_S`, and after `coordinator_timeout_s` (`COORDINATOR_TIMEOUT_S`, the
command's `--coordinator-timeout`) a one-line error naming the address, where JAX itself
would wait 300 s in silence and then abort the process from C++.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager

import keras
import numpy as np

from cvbench.training.distribution_base import Distribution
from cvbench.utils.launch import JAX_VARS, jax_processes

#: What `keras.distribution.initialize()` reads (`cvbench.utils.launch.JAX_VARS`).
ENV_VARS = JAX_VARS


#: Seconds a process waits for the JAX coordinator (and the coordinator for the processes)
#: by default: enough for processes started by hand on several hosts, short enough that a
#: wrong address is told within two minutes.
COORDINATOR_TIMEOUT_S = 120
#: Seconds between the lines that say a process is still waiting.
PROGRESS_EVERY_S = 10


def wait_for_coordinator(
    address: str, *, process_id: int, num_processes: int, timeout_s: float
) -> None:
    """Says that this process waits for the JAX coordinator at `address` (`host:port`) and,
    unless it is process 0 (which runs the coordinator), waits until the coordinator
    accepts a connection: a line at once, then one every `PROGRESS_EVERY_S` seconds.

    Raises:
        ValueError: `address` is not `host:port`.
        ConnectionError: nothing accepted a connection at `address` within `timeout_s`
            (its message names the address and `--coordinator-timeout`).
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"the JAX coordinator address must be host:port, got {address!r}")
    host = host.strip("[]")
    role = "runs" if process_id == 0 else "waits for"
    print(
        f"cvbench: process {process_id} of {num_processes} {role} the JAX coordinator at "
        f"{address} (up to {timeout_s:g} s; --coordinator-timeout)",
        flush=True,
    )
    if process_id == 0:
        return
    start = time.monotonic()
    next_note = start + PROGRESS_EVERY_S
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return
        except OSError as e:
            reason = e.strerror or str(e) or type(e).__name__
        now = time.monotonic()
        if now - start >= timeout_s:
            raise ConnectionError(
                f"the JAX coordinator at {address} did not answer within {timeout_s:g} s "
                f"({reason}): start process 0 there first, check "
                "KERAS_DISTRIBUTION_JOB_ADDRESSES, or wait longer with --coordinator-timeout"
            )
        if now >= next_note:
            print(
                f"cvbench: still waiting for the JAX coordinator at {address} "
                f"({now - start:.0f} s of {timeout_s:g} s)",
                flush=True,
            )
            next_note += PROGRESS_EVERY_S
        time.sleep(min(0.5, max(0.0, start + timeout_s - now)))


def launched_for_jax() -> bool:
    """Whether the `KERAS_DISTRIBUTION_*` variables ask for several processes
    (`cvbench.utils.launch.jax_processes`).

    Raises:
        ValueError: `KERAS_DISTRIBUTION_NUM_PROCESSES` is not an integer.
    """
    return jax_processes() > 1


def _initialize(
    job_addresses: str | None,
    num_processes: int | None,
    process_id: int | None,
    timeout_s: float = COORDINATOR_TIMEOUT_S,
):
    import jax

    if jax.distributed.is_initialized():
        return
    env = os.environ
    if job_addresses is None:
        job_addresses = env.get(ENV_VARS[0]) or env.get("JAX_COORDINATOR_ADDRESS")
    given = (job_addresses, num_processes, process_id)
    missing = [
        name
        for name, value in zip(ENV_VARS, given, strict=True)
        if value is None and name not in env
    ]
    if missing:
        raise ValueError(
            f"several JAX processes need {', '.join(missing)} (or the Trainer's arguments): "
            "the coordinator's host:port, the process count and this process' id"
        )
    num_processes = jax_processes(env) if num_processes is None else num_processes
    process_id = int(env[ENV_VARS[2]]) if process_id is None else process_id
    addresses = job_addresses.split(",")
    if len(addresses) > 1 and len(addresses) != num_processes:
        raise ValueError(
            f"{ENV_VARS[0]} names {len(addresses)} processes ({job_addresses}), but "
            f"num_processes is {num_processes}"
        )
    coordinator = addresses[0].strip()
    wait_for_coordinator(
        coordinator, process_id=process_id, num_processes=num_processes, timeout_s=timeout_s
    )
    try:
        # What keras.distribution.initialize() does, with the wait bounded.
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=max(1, int(timeout_s)),
        )
        from keras.src.backend.jax.distribution_lib import initialize_rng

        initialize_rng()  # one seed on every process, as Keras' own initialize draws it
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
        coordinator_timeout_s: how long processes wait for each other at start
            (`wait_for_coordinator`).

    Raises:
        ValueError: the backend is not JAX; a bad device count; a multi-process setting
            missing its coordinator or id.
        ConnectionError: the coordinator did not answer within `coordinator_timeout_s`.
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
        coordinator_timeout_s: float = COORDINATOR_TIMEOUT_S,
    ) -> None:
        if keras.config.backend() != "jax":
            raise ValueError(
                f"JAX data parallelism needs KERAS_BACKEND=jax, got {keras.config.backend()!r}"
            )
        processes = jax_processes() if num_processes is None else num_processes
        if processes > 1:
            _initialize(job_addresses, num_processes, process_id, coordinator_timeout_s)
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
