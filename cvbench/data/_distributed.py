"""Which slice of the data this process reads: its rank and size in the job that started it.

Horovod is never imported here. When the program has initialised `horovod.tensorflow`, its
rank and size; else those its launcher gave the process (horovodrun's `HOROVOD_RANK` /
`HOROVOD_SIZE`, mpirun's `OMPI_COMM_WORLD_*` or `PMI_*`), so that a dataset built before the
`Trainer` (which initialises Horovod) is still this rank's share, not every record on every
rank; JAX processes likewise (`jax.distributed` once initialised, else the
`KERAS_DISTRIBUTION_*` variables that start it). A single process is rank 0 of 1.
"""

from __future__ import annotations

import os
import sys

#: (rank, size) variables of the launchers: horovodrun (Gloo), Open MPI, MPICH/Hydra, and
#: Keras' multi-process JAX.
_LAUNCHER_VARS = (
    ("HOROVOD_RANK", "HOROVOD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("KERAS_DISTRIBUTION_PROCESS_ID", "KERAS_DISTRIBUTION_NUM_PROCESSES"),
)


def rank_and_size(environ=None) -> tuple[int, int]:
    """(rank, size) of this process' job: Horovod's once initialised, JAX's once
    `jax.distributed` started, else the launcher's variables, else (0, 1).

    Example:
        >>> rank_and_size({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"})  # horovodrun -np 2
        (1, 2)
        >>> rank_and_size({"PATH": "/bin"})
        (0, 1)
    """
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is not None:
        try:
            if hvd.is_initialized():
                return int(hvd.rank()), int(hvd.size())
        except (AttributeError, ValueError):  # very old Horovod, or not initialised
            pass
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            if jax.distributed.is_initialized():
                return int(jax.process_index()), int(jax.process_count())
        except AttributeError:  # an old JAX
            pass
    env = os.environ if environ is None else environ
    for rank_var, size_var in _LAUNCHER_VARS:
        rank, size = env.get(rank_var, ""), env.get(size_var, "")
        if rank.isdigit() and size.isdigit() and 0 <= int(rank) < int(size):
            return int(rank), int(size)
    return 0, 1


def resolve_shards(num_shards: int | None, shard_index: int | None) -> tuple[int, int]:
    """The (num_shards, shard_index) to use: the arguments, or the job's size and rank
    (`rank_and_size`).

    Raises:
        ValueError: only one of the two given, or an index outside 0..num_shards-1.
    """
    if num_shards is None and shard_index is None:
        rank, size = rank_and_size()
        return size, rank
    check_shards(num_shards, shard_index)
    return num_shards, shard_index


def check_shards(num_shards: int | None, shard_index: int | None) -> None:
    """Raises ValueError unless both are given with 0 <= shard_index < num_shards."""
    if num_shards is None or shard_index is None:
        raise ValueError(
            f"give both num_shards and shard_index, or neither (the job's size and rank are "
            f"used then); got num_shards={num_shards}, shard_index={shard_index}"
        )
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise ValueError(
            f"need num_shards >= 1 and 0 <= shard_index < num_shards, got num_shards="
            f"{num_shards}, shard_index={shard_index}"
        )
