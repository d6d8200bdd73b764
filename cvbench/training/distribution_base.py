"""What the Trainer asks of ranks: `Distribution` (rank, size, the scope steps run in, the
gradient reduction, host-side collectives between steps), its one-process form
`SingleProcess`, and `RankFailedError`, what a rank raises when another is lost.

The base of `cvbench.training.distributed.Horovod` and
`cvbench.training.jax_distributed.JaxDataParallel`, below both so that neither imports the
other: `cvbench.training.distributed.get_distribution` picks one of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import keras
import numpy as np

from cvbench.utils.errors import CvbenchError


class Distribution:
    """How ranks cooperate; this base class is one process: rank 0 of 1, collectives are the
    identity. Subclasses: `SingleProcess` and `Horovod`."""

    name = "single"
    rank = 0
    size = 1
    local_rank = 0
    #: Whether the compiled steps see the global batch (JAX `keras.distribution`), so that
    #: metric states are already global; False: each rank's steps see its own batch.
    global_steps = False

    @property
    def is_chief(self) -> bool:
        """True on rank 0, the rank that prints and writes files."""
        return self.rank == 0

    @property
    def num_devices(self) -> int:
        """Devices training together (one per rank here)."""
        return self.size

    def scope(self) -> contextlib.AbstractContextManager:
        """Where the Trainer builds variables and runs steps; nothing here."""
        return contextlib.nullcontext()

    def check_batch(self, batch_size: int) -> None:
        """Raises `ValueError` when `batch_size` per rank cannot be split; any size here."""

    def adopt_variables(self, variables: Sequence[keras.Variable]) -> None:
        """Lays out variables made outside `scope()` as those made in it; nothing here."""

    def wrap_optimizer(self, optimizer: keras.optimizers.Optimizer, compression: str = "none"):
        """Returns `optimizer` (nothing to average)."""
        del compression
        return optimizer

    def broadcast_variables(self, variables: Sequence[keras.Variable]) -> None:
        """Nothing to broadcast."""

    def broadcast_object(self, obj):
        """Returns `obj`."""
        return obj

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        """Returns `values` as float64."""
        return np.asarray(values, dtype=np.float64)

    def allreduce_mean(self, values: np.ndarray) -> np.ndarray:
        """Returns `values` as float64."""
        return np.asarray(values, dtype=np.float64)

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        """Returns `values` as float64."""
        return np.asarray(values, dtype=np.float64)

    def sum_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each array summed over ranks, in one collective (float64, shapes kept).

        The arrays are flattened into one vector for a single `allreduce_sum`, then split
        back; what every cross-rank total (metric states, counts) goes through.
        """
        arrays = [np.asarray(a, np.float64) for a in arrays]
        if self.size == 1 or not arrays:
            return arrays
        flat = self.allreduce_sum(np.concatenate([a.ravel() for a in arrays]))
        out, offset = [], 0
        for a in arrays:
            out.append(flat[offset : offset + a.size].reshape(a.shape))
            offset += a.size
        return out

    def allgather_rows(self, rows: np.ndarray) -> np.ndarray:
        """Every rank's rows, concatenated in rank order, on every rank.

        Args:
            rows: float64 [n_r, C] on rank r (n_r may differ between ranks, C may not).

        Returns:
            float64 [sum of n_r, C]: each rank writes its rows into its own slot of a zero
            array padded to the longest rank; one sum over ranks fills every slot.
        """
        rows = np.asarray(rows, np.float64)
        if self.size == 1:
            return rows
        size, rank = self.size, self.rank
        longest = int(self.allreduce_max(np.array([len(rows)]))[0])
        counts = np.zeros(size)
        counts[rank] = len(rows)
        slots = np.zeros((size, longest, rows.shape[1]))
        slots[rank, : len(rows)] = rows
        counts, slots = self.sum_arrays([counts, slots])
        counts = counts.astype(np.int64)
        return np.concatenate([slots[r, : counts[r]] for r in range(size)], axis=0)

    def rank_failure(self, error: BaseException) -> RankFailedError | None:
        """A `RankFailedError` when `error` means another rank died, else None."""
        del error
        return None


class RankFailedError(CvbenchError, RuntimeError):
    """Another rank failed or exited, so the collectives of this one can never complete."""


class SingleProcess(Distribution):
    """One process: rank 0 of 1; every collective is the identity."""
