"""`Trainer.evaluate`'s loop: Keras' `evaluate` on each rank's part of the data, then the
metric states (totals and counts) summed over ranks, so that every rank gets the results
over the whole set. Under JAX data parallelism the steps already see the global batch, so
the metric states are global and are not summed again."""

from __future__ import annotations

from typing import Any

import keras

from cvbench.training.inputs import evaluation_batches, is_array_data, known_length, rank_rows


def evaluate_over_ranks(
    model: keras.Model,
    distribution: Any,
    data: Any,
    *,
    steps: int | None = None,
    batch_size: int | None = None,
) -> dict[str, float]:
    """Loss and metrics of the compiled `model` over `data`, summed over the ranks of
    `distribution` (a `Distribution`) before averaging (see `Trainer.evaluate`, which
    documents the arguments)."""
    if is_array_data(data):
        part = rank_rows(data, distribution.rank, distribution.size)
        batch_size = batch_size or 32
        if distribution.global_steps:
            part = _padded_for_global_steps(distribution, part, batch_size)
        x, y, sample_weight = (part + (None,))[:3]
        model.evaluate(
            x,
            y,
            sample_weight=sample_weight,
            batch_size=batch_size,
            steps=steps,
            verbose=0,
        )
    else:
        if steps is None and not type(data).__module__.startswith("tensorflow"):
            steps = known_length(data)
        model.evaluate(evaluation_batches(data), steps=steps, verbose=0)
    if distribution.size > 1 and not distribution.global_steps:
        variables = model.metrics_variables
        values = [keras.ops.convert_to_numpy(v.value) for v in variables]
        totals = distribution.sum_arrays(values)
        for variable, value, total in zip(variables, values, totals, strict=True):
            variable.assign(total.astype(value.dtype))
    results = model.get_metrics_result()
    return {k: float(keras.ops.convert_to_numpy(v)) for k, v in results.items()}


def evaluated_rows(model: keras.Model) -> int:
    """The examples the last `evaluate_over_ranks` of the compiled `model` (a
    `TrainingModel`) scored, over all ranks: its loss tracker's count, which weighs each
    batch by its real rows (padding rows weigh 0). 0 when no batch was evaluated."""
    count = model._loss_tracker.count
    return int(round(float(keras.ops.convert_to_numpy(count))))


def _padded_for_global_steps(distribution: Any, part: tuple, batch_size: int) -> tuple:
    """This rank's rows padded to as many full batches as the rank with most batches has,
    the padding weighing 0: every step of a global-array engine (JAX data parallelism) then
    has one full batch from every process (rows differ by one between ranks, and a last
    partial batch would not split over the devices)."""
    import numpy as np

    x, y, weight = (tuple(part) + (None,))[:3]
    rows = len(keras.tree.flatten(x)[0])
    batches = -(-rows // batch_size)
    batches = int(distribution.allreduce_max(np.array([batches], np.float64))[0])
    pad = batches * batch_size - rows
    weight = np.ones(rows, "float32") if weight is None else np.asarray(weight, "float32")

    def padded(a):
        a = np.asarray(a)
        return np.concatenate([a, np.repeat(a[:1], pad, axis=0)]) if pad else a

    x, y = keras.tree.map_structure(padded, x), keras.tree.map_structure(padded, y)
    return x, y, np.concatenate([weight, np.zeros(pad, "float32")])
