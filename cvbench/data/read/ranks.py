"""How a split is shared among ranks, without TensorFlow: the per-rank seed, the contiguous
record range of a rank, and the evaluation step count every rank runs.

The tf.data reader (`cvbench.data.read.reader`) and the TensorFlow-free grain path
(`cvbench.data.grain.dataset`) both use these, so a rank's records and seed are the same
whichever reads them.
"""

from __future__ import annotations

import numpy as np


def rank_seed(seed: int | None, shard_index: int) -> int | None:
    """A per-rank seed derived from `seed`, so ranks do not draw identical augmentations.

    Example:
        >>> rank_seed(None, 3) is None
        True
        >>> rank_seed(0, 0) == rank_seed(0, 0) != rank_seed(0, 1)
        True
    """
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, shard_index]).generate_state(1)[0])


def rank_range(total: int, num_shards: int, shard_index: int) -> tuple[int, int]:
    """Records `[lo, hi)` of rank `shard_index` of `num_shards`, of `total` records numbered
    in order: `[r * N // R, (r + 1) * N // R)`, so the ranks' counts differ by at most one
    and every record belongs to exactly one rank.

    Example:
        >>> [rank_range(10, 3, r) for r in range(3)]
        [(0, 3), (3, 6), (6, 10)]
    """
    return shard_index * total // num_shards, (shard_index + 1) * total // num_shards


def eval_steps(max_records_per_rank: int, batch_size: int) -> int:
    """Batches every rank yields: ceil(max records of any rank / batch_size).

    Example:
        >>> eval_steps(10, 4), eval_steps(8, 4), eval_steps(0, 4)
        (3, 2, 0)
    """
    return -(-max_records_per_rank // batch_size)


def eval_steps_of(total: int, num_shards: int, batch_size: int) -> int:
    """The evaluation batches of every rank over `total` records: those of the largest
    rank, `eval_steps(ceil(total / num_shards), batch_size)`.

    Example:
        >>> eval_steps_of(10, 3, 2)  # ranks of 3, 3, 4 records: 2 batches each
        2
    """
    return eval_steps(-(-total // num_shards), batch_size)
