"""The suite's memory between tests (tests/conftest.py): what a test's `fit` traced is freed
after it. Regression: CI's TensorFlow run grew to 24 GiB and was killed at 61%, because
`tf.custom_gradient` (TensorFlow's all-reduce in every Keras train step) keeps each traced
step, and with it the model's variables, in TensorFlow's global gradient registry."""

from __future__ import annotations

import gc

import keras
import numpy as np

from tests.conftest import _custom_gradients, collect_if_grown, drop_custom_gradients


def _graphs() -> int:
    """How many traced TensorFlow graphs (FuncGraph) are alive in this process."""
    gc.collect()
    return sum(type(o).__name__ == "FuncGraph" for o in gc.get_objects())


def _fit_once() -> None:
    """Fits a 3 -> 2 dense model one step under TensorFlow, and lets it go."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((4, 3), "float32"), np.zeros((4, 2), "float32"), verbose=0)
    keras.backend.clear_session(free_memory=False)


def test_a_fitted_models_graph_is_freed_after_the_cleanup():
    keep, graphs = _custom_gradients(), _graphs()
    _fit_once()
    # One step traced: at least one registry entry holds its graph.
    assert drop_custom_gradients(keep) >= 1
    assert _graphs() == graphs
    assert _custom_gradients() == keep


def test_without_the_cleanup_the_registry_keeps_the_graph():
    # The cause, shown: the same fit with its entries left in place keeps its train step's
    # graph alive (and through the graph's captures, the model's variables).
    keep, graphs = _custom_gradients(), _graphs()
    _fit_once()
    try:
        assert _graphs() > graphs
    finally:
        drop_custom_gradients(keep)


_ADDED_BY_A_TEST: set[str] = set()


def test_a_test_that_fits_adds_registry_entries():
    keep = _custom_gradients()
    _fit_once()
    _ADDED_BY_A_TEST.update(_custom_gradients() - keep)
    assert _ADDED_BY_A_TEST


def test_the_next_test_starts_without_them():
    # The autouse fixture dropped what the test before added (pytest runs a file in order).
    assert _ADDED_BY_A_TEST
    assert not _ADDED_BY_A_TEST & _custom_gradients()


def test_a_collection_runs_only_past_the_growth_limit():
    assert collect_if_grown(limit=2**62) is False  # 4 EiB: never grown by that much
    assert collect_if_grown(limit=-(2**62)) is True  # any size is past a negative limit
