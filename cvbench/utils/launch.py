"""Who started this process, and where it sits in its job: the launcher (horovodrun, an MPI
launcher, Keras' multi-process JAX variables, or none), its rank, size, local rank and local
size, read from the environment the launcher gave the process.

The one place that knows the launchers' variables: the data readers shard by it before
Horovod or `jax.distributed` start (`cvbench.data._distributed`), the Trainer picks its
`Distribution` by it (`cvbench.training.distributed.get_distribution`), and the `cvbench`
command decides whether a JAX coordinator is to be waited for. Nothing is imported here
(no TensorFlow, Horovod or JAX): `launch_from_env` only reads a mapping; `current_launch`
also asks a Horovod or JAX that the program has already started, through `sys.modules`.

Example:
    >>> launch_from_env({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"})  # horovodrun -np 2
    Launch(by='horovodrun', rank=1, size=2, local_rank=0, local_size=1)
    >>> launch_from_env({"PATH": "/bin"})
    Launch(by='single', rank=0, size=1, local_rank=0, local_size=1)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace

#: The launchers, as `Launch.by` names them.
HOROVODRUN, MPIRUN, JAX, SINGLE = "horovodrun", "mpirun", "jax", "single"

#: Each launcher's variables: (launcher, rank, size, local rank, local size), in the order
#: they are read: horovodrun (Gloo), Open MPI, MPICH/Hydra, Keras' multi-process JAX (which
#: names no local rank).
LAUNCHER_VARS = (
    (HOROVODRUN, "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    (
        MPIRUN,
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    (MPIRUN, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    (JAX, "KERAS_DISTRIBUTION_PROCESS_ID", "KERAS_DISTRIBUTION_NUM_PROCESSES", None, None),
)
#: What horovodrun (Gloo) sets for each rank, named when they are stale.
HOROVOD_RUN_VARS = (
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "HOROVOD_LOCAL_SIZE",
    "HOROVOD_CROSS_RANK",
    "HOROVOD_CROSS_SIZE",
    "HOROVOD_HOSTNAME",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT",
    "HOROVOD_CONTROLLER",
    "HOROVOD_CPU_OPERATIONS",
)
#: What an MPI launcher gives its processes to reach it (Open MPI's ORTE/PMIx, MPICH's Hydra).
MPI_CONTACT_VARS = ("OMPI_MCA_orte_hnp_uri", "PMIX_SERVER_URI", "PMI_FD", "PMI_PORT")
#: What `keras.distribution.initialize()` reads to start several JAX processes.
JAX_VARS = (
    "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "KERAS_DISTRIBUTION_PROCESS_ID",
)


@dataclass(frozen=True)
class Launch:
    """Who started this process and where it sits in the job.

    Attributes:
        by: `HOROVODRUN` (Horovod's rank variable), `MPIRUN` (an MPI launcher's rank
            variable), `JAX` (`KERAS_DISTRIBUTION_NUM_PROCESSES` asks for several
            processes) or `SINGLE`; Horovod's launchers first, as the Trainer picks Horovod
            first.
        rank, size: this process' rank of `size`, from the first launcher whose rank and
            size variables are both integers with 0 <= rank < size; else 0 of 1 (a rank
            variable alone, or one outside its size, says no rank).
        local_rank, local_size: the same on this host, from the same launcher; 0 of 1 where
            it names none (JAX).

    Example:
        >>> launch = launch_from_env({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
        ...     "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
        >>> launch.by, launch.rank, launch.size, launch.local_rank, launch.horovod
        ('mpirun', 2, 4, 0, True)
    """

    by: str = SINGLE
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def horovod(self) -> bool:
        """Whether a Horovod launcher (horovodrun or mpirun) started this process."""
        return self.by in (HOROVODRUN, MPIRUN)

    @property
    def jax(self) -> bool:
        """Whether the JAX variables ask for several processes (and no Horovod launcher
        started this one)."""
        return self.by == JAX


def launch_from_env(environ: Mapping[str, str] | None = None) -> Launch:
    """The `Launch` the environment describes (default `os.environ`).

    Example:
        >>> launch_from_env({"KERAS_DISTRIBUTION_PROCESS_ID": "1",
        ...                  "KERAS_DISTRIBUTION_NUM_PROCESSES": "2"})
        Launch(by='jax', rank=1, size=2, local_rank=0, local_size=1)
        >>> launch_from_env({"HOROVOD_RANK": "2", "HOROVOD_SIZE": "2"})  # not of that size
        Launch(by='horovodrun', rank=0, size=1, local_rank=0, local_size=1)
    """
    env = os.environ if environ is None else environ
    for _, rank_var, size_var, local_rank_var, local_size_var in LAUNCHER_VARS:
        rank_size = _rank_of(env, rank_var, size_var)
        if rank_size is not None:
            local = _rank_of(env, local_rank_var, local_size_var) or (0, 1)
            return Launch(_launcher(env), *rank_size, *local)
    return Launch(_launcher(env))


def _launcher(env: Mapping[str, str]) -> str:
    """`Launch.by` of `env`: the MPI rank variables first (horovodrun's MPI mode runs under
    mpirun), then horovodrun's, then the JAX process count."""
    if "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env:
        return MPIRUN
    if "HOROVOD_RANK" in env:
        return HOROVODRUN
    try:
        several = jax_processes(env) > 1
    except ValueError:
        several = True  # not a number: the JAX start names it
    return JAX if several else SINGLE


def _rank_of(env: Mapping[str, str], rank_var: str | None, size_var: str | None):
    """(rank, size) of two variables when both are integers with 0 <= rank < size, else
    None."""
    if rank_var is None or size_var is None:
        return None
    rank, size = env.get(rank_var, ""), env.get(size_var, "")
    if rank.isdigit() and size.isdigit() and int(rank) < int(size):
        return int(rank), int(size)
    return None


def jax_processes(environ: Mapping[str, str] | None = None) -> int:
    """The processes `KERAS_DISTRIBUTION_NUM_PROCESSES` asks for: 1 when it is unset or empty.

    Raises:
        ValueError: it is not an integer (the message names it).

    Example:
        >>> jax_processes({"KERAS_DISTRIBUTION_NUM_PROCESSES": "4"}), jax_processes({})
        (4, 1)
    """
    env = os.environ if environ is None else environ
    value = env.get(JAX_VARS[1], "") or "1"
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{JAX_VARS[1]} must be an integer, got {value!r}") from None


def mpi_rank_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """The MPI launchers' rank variables set in the environment, sorted.

    Example:
        >>> mpi_rank_variables({"PMI_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "HOME": "/h"})
        ['OMPI_COMM_WORLD_RANK', 'PMI_SIZE']
    """
    env = os.environ if environ is None else environ
    return sorted(
        n for n in env if n.startswith("OMPI_COMM_WORLD_") or n in ("PMI_RANK", "PMI_SIZE")
    )


def current_launch(environ: Mapping[str, str] | None = None) -> Launch:
    """`launch_from_env`, with the rank and size of a Horovod (`horovod.tensorflow`) or a
    `jax.distributed` that the program has already started, which win over the variables.
    Neither is imported here: one not imported is not started.

    Example:
        >>> current_launch({"PMI_RANK": "0", "PMI_SIZE": "3"}).size  # Horovod not started
        3
    """
    launch = launch_from_env(environ)
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is not None:
        try:
            if hvd.is_initialized():
                return _horovod_ranks(launch, hvd)
        except (AttributeError, ValueError):  # a very old Horovod, or not initialised
            pass
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            if jax.distributed.is_initialized():
                return replace(launch, rank=int(jax.process_index()), size=int(jax.process_count()))
        except AttributeError:  # an old JAX
            pass
    return launch


def _horovod_ranks(launch: Launch, hvd) -> Launch:
    """`launch` with the rank and size of a started Horovod, and its local rank and size
    where it tells them."""
    launch = replace(launch, rank=int(hvd.rank()), size=int(hvd.size()))
    try:
        return replace(launch, local_rank=int(hvd.local_rank()), local_size=int(hvd.local_size()))
    except (AttributeError, ValueError):
        return launch
