"""Feeding batches to the Trainer, with a data position that a resume can return to.

Three kinds of training data, each restartable at a saved position:

- NumPy arrays `(x, y)` or `(x, y, sample_weight)` (structures of arrays allowed): the
  Trainer batches them. Each epoch has its own order (a permutation seeded by
  `(seed, epoch)`); global batch `b` is `order[b*G:(b+1)*G]` with `G = batch_size * ranks`,
  and rank `r` takes its `r`-th slice of `batch_size` rows. The last partial global batch is
  dropped. A resume jumps straight to the saved batch. `steps_per_epoch` may take fewer
  batches; more than the rows hold is refused (`check_array_steps`).
- A re-iterable of batches (a `tf.data.Dataset`, a list, a `keras.utils.PyDataset`...):
  with `steps_per_epoch` given, one iterator runs across epochs (make the dataset repeat);
  without it, every epoch iterates the whole dataset again. A resume skips the batches
  already consumed (`Dataset.skip` for tf.data): exact when the dataset yields the same
  sequence every time it is iterated from the start (seeded shuffles, no reshuffling between
  iterations), at the cost of reading the skipped batches; data with an
  `iterate_from(start)` method (grain's `GrainBatches`, whose iterator state follows from
  the position) starts there without reading them.
- A function `epoch -> iterable of batches`: each epoch gets a fresh iterable; a resume
  skips only the batches already consumed in that epoch.

A batch is `(x, y)`, `(x, y, sample_weight)` or `x` alone; `x` and `y` may be tensors or
nested structures. Datasets must already be sharded per rank (the data builders take
`num_shards`/`shard_index`); arrays are sharded here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import keras
import numpy as np

Batch = tuple[Any, Any, Any]


def split_batch(element: Any) -> Batch:
    """Returns `(x, y, sample_weight)` for a dataset element (missing parts are None)."""
    if isinstance(element, (tuple, list)):
        if len(element) == 1:
            return element[0], None, None
        if len(element) == 2:
            return element[0], element[1], None
        if len(element) == 3:
            return element[0], element[1], element[2]
        raise ValueError(
            f"a batch must be x, (x, y) or (x, y, sample_weight); got a {type(element).__name__}"
            f" of length {len(element)}"
        )
    return element, None, None


def host_batch(batch: Batch) -> Batch:
    """`batch` with TensorFlow tensors (a `tf.data.Dataset`'s elements) as NumPy arrays when
    the Keras backend is not TensorFlow: JAX cannot take `tf.Tensor`s (their `tf.float32`
    dtype is no NumPy dtype), so `imagenet_dataset` / `coco_dataset` pipelines feed the JAX
    Trainer through here. On TensorFlow, `batch` is returned as it is."""
    if keras.config.backend() == "tensorflow":
        return batch

    def to_host(leaf: Any) -> Any:
        if type(leaf).__module__.startswith("tensorflow") and hasattr(leaf, "numpy"):
            return leaf.numpy()
        return leaf

    return tuple(
        None if part is None else keras.tree.map_structure(to_host, part) for part in batch
    )


def batch_length(x: Any) -> int:
    """The leading dimension of the first tensor in `x` (images in the batch)."""
    leaves = keras.tree.flatten(x)
    if not leaves:
        raise ValueError("a batch has no tensors")
    return int(leaves[0].shape[0])


def is_array_data(data: Any) -> bool:
    """Whether `data` is NumPy arrays `(x, y[, sample_weight])` rather than batches."""
    if not isinstance(data, tuple) or not 2 <= len(data) <= 3:
        return False
    leaves = [leaf for part in data for leaf in keras.tree.flatten(part)]
    return bool(leaves) and all(isinstance(leaf, np.ndarray) for leaf in leaves)


def check_array_targets(data: Any, loss: Any, model: keras.Model) -> None:
    """Checks the targets `y` of array data `(x, y[, sample_weight])` on the host before a
    step runs, by `loss`'s rule (`cvbench.training.losses.check_loss_targets`) against the
    width of `model`'s single output: array data has no input pipeline to check its labels,
    and a loss cannot check inside a step (XLA and JAX drop run-time assertions: labels out
    of range trained to a loss of 0 under JAX). Other data, a model with several outputs or
    a loss that cannot say what its targets must be: nothing checked.

    Raises:
        ValueError: targets the loss would read wrong (e.g. `label 7 of row 0 is outside
            [0, 3) (the model's 3 outputs)`).
    """
    from cvbench.training.losses import check_loss_targets

    if not is_array_data(data) or data[1] is None or keras.tree.is_nested(data[1]):
        return
    width = _output_width(model, data[0])
    if width is not None:
        check_loss_targets(loss, data[1], width)


def _output_width(model: keras.Model, x: Any) -> int | None:
    """The last dimension of `model`'s output for inputs like `x`, when it has one output of
    a known width (a functional model's `outputs`, else its output spec), else None."""
    try:
        outputs = getattr(model, "outputs", None)  # a functional model's; None when subclassed
        if not outputs:
            shaped = keras.tree.map_structure(
                lambda a: keras.KerasTensor((1, *a.shape[1:]), dtype=a.dtype), x
            )
            outputs = model.compute_output_spec(shaped)
    except Exception:  # a model that cannot say without running: its loss sees the labels
        return None
    leaves = keras.tree.flatten(outputs)
    if len(leaves) != 1 or not leaves[0].shape or leaves[0].shape[-1] is None:
        return None
    return int(leaves[0].shape[-1])


def _is_tf_dataset(data: Any) -> bool:
    return type(data).__module__.startswith("tensorflow") and hasattr(data, "skip")


def iterate_from(data: Iterable, start: int) -> Iterator:
    """An iterator over `data` from batch `start` on: `data.iterate_from(start)` where the
    data can restart at a position (grain's `GrainBatches`: its iterator state set, nothing
    read before it), `Dataset.skip` for tf.data, else the skipped batches read and dropped."""
    if start and hasattr(data, "iterate_from"):
        return data.iterate_from(start)
    if start and _is_tf_dataset(data):
        return iter(data.skip(start))
    return itertools.islice(iter(data), start, None)


class BatchSource:
    """Batches of one rank, epoch by epoch, restartable at a position.

    Attributes:
        steps_per_epoch: batches per epoch, or None when an epoch ends with the data.
        batch_size: this rank's batch size when known up front, else None.
    """

    steps_per_epoch: int | None = None
    batch_size: int | None = None
    seed: int = 0

    def epoch(self, epoch: int, start: int, consumed: int) -> Iterator[Batch]:
        """Yields the batches of `epoch` from index `start` on.

        Args:
            epoch: 0-based epoch.
            start: index of the first batch to yield within the epoch.
            consumed: batches consumed since the start of training before this point.
        """
        raise NotImplementedError


class ArraySource(BatchSource):
    """Batches cut from NumPy arrays (see the module docstring).

    Args:
        arrays: `(x, y)` or `(x, y, sample_weight)`; structures of arrays allowed.
        batch_size: rows per rank and step.
        rank: this rank.
        size: number of ranks.
        shuffle: a new order each epoch (seeded) instead of the stored order.
        seed: shuffle seed.
    """

    def __init__(
        self,
        arrays: tuple,
        *,
        batch_size: int,
        rank: int = 0,
        size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"batch_size must be a positive int for array data, got {batch_size!r}"
            )
        self.arrays = tuple(arrays) + (None,) * (3 - len(arrays))
        lengths = {len(leaf) for part in arrays for leaf in keras.tree.flatten(part)}
        if len(lengths) != 1:
            raise ValueError(f"arrays must all have the same length, got lengths {sorted(lengths)}")
        self.num_rows = lengths.pop()
        self.batch_size = batch_size
        self.rank, self.size = rank, size
        self.shuffle, self.seed = shuffle, seed
        global_batch = batch_size * size
        self.steps_per_epoch = self.num_rows // global_batch
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"{self.num_rows} rows are fewer than one global batch of {global_batch} "
                f"({batch_size} x {size} ranks)"
            )

    def order(self, epoch: int) -> np.ndarray:
        """The row order of `epoch`."""
        if not self.shuffle:
            return np.arange(self.num_rows)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_rows)

    def epoch(self, epoch: int, start: int, consumed: int) -> Iterator[Batch]:
        del consumed
        order = self.order(epoch)
        global_batch = self.batch_size * self.size
        for b in range(start, self.steps_per_epoch):
            lo = b * global_batch + self.rank * self.batch_size
            yield _take_rows(self.arrays, order[lo : lo + self.batch_size])


class IterableSource(BatchSource):
    """Batches from a re-iterable (see the module docstring).

    Args:
        data: a `tf.data.Dataset` or any re-iterable of batches.
        steps_per_epoch: batches per epoch; None iterates `data` once per epoch.
    """

    def __init__(self, data: Iterable, *, steps_per_epoch: int | None = None) -> None:
        self.data = data
        self.steps_per_epoch = steps_per_epoch
        self._iterator: Iterator | None = None
        if steps_per_epoch is None:
            self.steps_per_epoch = known_length(data)
        self._persistent = steps_per_epoch is not None
        self.batch_size = _static_batch_size(data)

    def _iterate_from(self, skip: int) -> Iterator:
        return iterate_from(self.data, skip)

    def epoch(self, epoch: int, start: int, consumed: int) -> Iterator[Batch]:
        if self._persistent:
            if self._iterator is None:
                self._iterator = self._iterate_from(consumed)
            iterator = self._iterator
        else:
            iterator = self._iterate_from(start)
        for element in iterator:
            yield host_batch(split_batch(element))


class FactorySource(BatchSource):
    """Batches from `make(epoch)`, a fresh iterable per epoch.

    Args:
        make: function of the 0-based epoch returning an iterable of batches.
        steps_per_epoch: batches per epoch; None runs each iterable to its end.
    """

    def __init__(self, make: Callable[[int], Iterable], *, steps_per_epoch: int | None) -> None:
        self.make = make
        self.steps_per_epoch = steps_per_epoch

    def epoch(self, epoch: int, start: int, consumed: int) -> Iterator[Batch]:
        del consumed
        for element in iterate_from(self.make(epoch), start):
            yield host_batch(split_batch(element))


def make_source(
    data: Any,
    *,
    batch_size: int | None,
    steps_per_epoch: int | None,
    rank: int,
    size: int,
    shuffle: bool,
    seed: int,
) -> BatchSource:
    """Picks the `BatchSource` for `data` (arrays, a re-iterable, or an epoch function).

    Raises:
        ValueError: for data of an unsupported kind or inconsistent sizes, a
            `steps_per_epoch` that is not a positive int, or more batches than arrays hold
            (`check_array_steps`).
    """
    bad_steps = not isinstance(steps_per_epoch, int) or isinstance(steps_per_epoch, bool)
    if steps_per_epoch is not None and (bad_steps or steps_per_epoch < 1):
        raise ValueError(f"steps_per_epoch must be a positive int, got {steps_per_epoch!r}")
    if is_array_data(data):
        source = ArraySource(
            data, batch_size=batch_size, rank=rank, size=size, shuffle=shuffle, seed=seed
        )
        if steps_per_epoch is not None:
            check_array_steps(steps_per_epoch, source)
            source.steps_per_epoch = steps_per_epoch
        return source
    if callable(data) and not hasattr(data, "__iter__"):
        source = FactorySource(data, steps_per_epoch=steps_per_epoch)
    elif hasattr(data, "__iter__") and not isinstance(data, (str, bytes, dict)):
        if iter(data) is data:
            raise ValueError(
                "training data must be re-iterable (a dataset, a list, or a function of the "
                "epoch), not a one-shot iterator or generator: a resume has to restart it"
            )
        source = IterableSource(data, steps_per_epoch=steps_per_epoch)
    else:
        raise ValueError(
            "training data must be NumPy arrays (x, y[, sample_weight]), a tf.data.Dataset or "
            f"other re-iterable of batches, or a function epoch -> batches; got {type(data)!r}"
        )
    if batch_size is not None:
        source.batch_size = batch_size
    return source


def check_array_steps(steps_per_epoch: int, source: ArraySource) -> None:
    """Refuses a `steps_per_epoch` over the batches an epoch of arrays holds (its rows //
    the global batch; each epoch one pass over the rows, reshuffled): it would not be
    honoured, as a dataset that runs out is refused in the epoch (fewer steps are taken).

    Example:
        >>> x, y = np.zeros((8, 2), "float32"), np.zeros(8, "int32")
        >>> try:
        ...     check_array_steps(10, ArraySource((x, y), batch_size=4))
        ... except ValueError as error:
        ...     for part in str(error).split(" ("):
        ...         print(part)
        steps_per_epoch=10 is more than the 2 batches an epoch of the arrays holds
        8 rows // global batch 4 = 4 x 1 ranks): pass steps_per_epoch of at most 2, or None

    Raises:
        ValueError: naming `steps_per_epoch` and the rows / batch arithmetic.
    """
    if steps_per_epoch > source.steps_per_epoch:
        global_batch = source.batch_size * source.size
        raise ValueError(
            f"steps_per_epoch={steps_per_epoch} is more than the {source.steps_per_epoch} "
            f"batches an epoch of the arrays holds ({source.num_rows} rows // global batch "
            f"{global_batch} = {source.batch_size} x {source.size} ranks): pass "
            f"steps_per_epoch of at most {source.steps_per_epoch}, or None"
        )


def _take_rows(arrays: tuple, rows: np.ndarray) -> Batch:
    return tuple(
        None if part is None else keras.tree.map_structure(lambda a: a[rows], part)
        for part in arrays
    )


def known_length(data: Any) -> int | None:
    """Batches in `data` when known (`len`, or a finite tf.data cardinality), else None."""
    if _is_tf_dataset(data):
        cardinality = int(data.cardinality())
        return cardinality if cardinality > 0 else None
    try:
        return len(data)
    except TypeError:
        return None


def _static_batch_size(data: Any) -> int | None:
    if not _is_tf_dataset(data):
        return None
    spec = data.element_spec
    x = spec[0] if isinstance(spec, (tuple, list)) else spec
    leaves = keras.tree.flatten(x)
    if leaves and leaves[0].shape.rank and leaves[0].shape[0] is not None:
        return int(leaves[0].shape[0])
    return None


def peek_batch_size(data: Any) -> int:
    """Reads the batch size from the first batch of re-iterable data."""
    if callable(data) and not hasattr(data, "__iter__"):
        data = data(0)
    for element in data:
        return batch_length(split_batch(element)[0])
    raise ValueError("the training data is empty")


def rank_rows(data: tuple, rank: int, size: int) -> tuple:
    """This rank's contiguous share of array data (shares differ by at most one row)."""
    if size == 1:
        return tuple(data)
    n = len(keras.tree.flatten(data[0])[0])
    lo, hi = rank * n // size, (rank + 1) * n // size
    return tuple(
        None if part is None else keras.tree.map_structure(lambda a: a[lo:hi], part)
        for part in data
    )


def evaluation_batches(data: Any):
    """A generator over `data`'s batches for `Model.evaluate` (tf.data passes through)."""
    if type(data).__module__.startswith("tensorflow"):
        return data
    if callable(data) and not hasattr(data, "__iter__"):
        data = data(0)

    def generate():
        for element in data:
            x, y, sample_weight = split_batch(element)
            yield (x, y) if sample_weight is None else (x, y, sample_weight)

    return generate()
