"""Which slice of the data this process reads: its rank and size in the job that started it.

Horovod is never imported here. The rank and size are the launcher's
(`cvbench.utils.launch.current_launch`): those of a Horovod or `jax.distributed` the program
has started, else those its launcher gave the process (horovodrun's `HOROVOD_RANK` /
`HOROVOD_SIZE`, mpirun's `OMPI_COMM_WORLD_*` or `PMI_*`, the `KERAS_DISTRIBUTION_*` variables
that start several JAX processes), so that a dataset built before the `Trainer` (which
initialises Horovod) is still this rank's share, not every record on every rank. A single
process is rank 0 of 1.
"""

from __future__ import annotations

from collections.abc import Mapping

from cvbench.utils.launch import current_launch


def rank_and_size(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(rank, size) of this process' job: Horovod's once initialised, JAX's once
    `jax.distributed` started, else the launcher's variables, else (0, 1).

    Example:
        >>> rank_and_size({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"})  # horovodrun -np 2
        (1, 2)
        >>> rank_and_size({"PATH": "/bin"})
        (0, 1)
    """
    launch = current_launch(environ)
    return launch.rank, launch.size


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
