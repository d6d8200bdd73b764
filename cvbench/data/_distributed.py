"""Which slice of the data this process reads: Horovod's rank and size when Horovod is running.

Horovod is never imported here: if the program has not imported `horovod.tensorflow` it cannot
have initialised it, and a single process (rank 0 of 1) is assumed.
"""

from __future__ import annotations

import sys


def rank_and_size() -> tuple[int, int]:
    """(rank, size) of an initialised Horovod job, else (0, 1)."""
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None:
        return 0, 1
    try:
        if not hvd.is_initialized():
            return 0, 1
    except (AttributeError, ValueError):  # very old Horovod, or not initialised
        return 0, 1
    return int(hvd.rank()), int(hvd.size())


def resolve_shards(num_shards: int | None, shard_index: int | None) -> tuple[int, int]:
    """The (num_shards, shard_index) to use: the arguments, or Horovod's size and rank.

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
            f"give both num_shards and shard_index, or neither (Horovod's size and rank are "
            f"used then); got num_shards={num_shards}, shard_index={shard_index}"
        )
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise ValueError(
            f"need num_shards >= 1 and 0 <= shard_index < num_shards, got num_shards="
            f"{num_shards}, shard_index={shard_index}"
        )
