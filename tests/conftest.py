"""Shared test setup: every test starts from the same seed, a fresh Keras session and the
float32 dtype policy (a test that sets a mixed policy cannot leak it into the next one);
the tests named in `heavy_tests.txt` are marked `heavy` (`make test` deselects them)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import h5py
import keras
import numpy as np
import pytest

HEAVY_LIST = Path(__file__).with_name("heavy_tests.txt")


def _heavy_ids() -> set[str]:
    lines = HEAVY_LIST.read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def _stale(ids: set[str]) -> list[str]:
    """Listed ids whose file or test function no longer exists (checked from the source)."""
    root = HEAVY_LIST.parent.parent
    stale = []
    for node in sorted(ids):
        path, _, name = node.partition("::")
        source = root / path
        function = name.split("[")[0]
        if not source.is_file() or f"def {function}(" not in source.read_text():
            stale.append(node)
    return stale


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: `-m "not heavy"` must see the mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks `heavy_tests.txt`'s tests `heavy`; a listed test whose file or function is gone
    stops the run, so the list cannot rot."""
    heavy = _heavy_ids()
    stale = _stale(heavy)
    if stale:
        raise pytest.UsageError(f"{HEAVY_LIST.name} names tests that do not exist: {stale}")
    for item in items:
        if item.nodeid in heavy:
            item.add_marker(pytest.mark.heavy)


# The suite's process grew by 20 GB over CI's TensorFlow run (killed at 24 GiB, 61%). The
# cause: `tf.custom_gradient` in graph mode (TensorFlow's own all-reduce in every Keras train
# step traced under TensorFlow) registers a gradient function in TensorFlow's global gradient
# registry for good, and it holds the traced step's graph and, through its captures, the
# model's variables: every `fit` of a test kept its model's weights alive. After each test
# the entries it added are dropped (its graphs are traced; nothing differentiates them
# again); the graphs are then reference cycles that only a full collection frees, and glibc
# keeps the freed pages. A collection costs 0.2-0.6 s, too much after each of ~3000 tests,
# so one runs when the resident size has grown this much since the last
# (tests/test_conftest_memory.py).
COLLECT_AFTER_GROWTH = 256 * 2**20


def _gradient_registry() -> dict | None:
    """TensorFlow's registry of gradient functions by op type, where TensorFlow is loaded."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else None


def _custom_gradients() -> set[str]:
    registry = _gradient_registry()
    return {k for k in registry if k.startswith("CustomGradient-")} if registry else set()


def drop_custom_gradients(keep: set[str]) -> int:
    """Removes the `tf.custom_gradient` entries not in `keep`; returns how many."""
    registry = _gradient_registry()
    dropped = _custom_gradients() - keep
    for key in dropped:
        del registry[key]
    return len(dropped)


def _resident_bytes() -> int:
    """This process' resident set size (Linux /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _give_back_memory() -> None:
    """A full collection, then glibc's free pages back to the system (malloc_trim)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


_collected_at = [_resident_bytes()]


def collect_if_grown(limit: int = COLLECT_AFTER_GROWTH) -> bool:
    """Collects when the resident size grew by `limit` bytes since the last collection;
    True when it did."""
    if _resident_bytes() - _collected_at[0] < limit:
        return False
    _give_back_memory()
    _collected_at[0] = _resident_bytes()
    return True


@pytest.fixture(autouse=True)
def _fresh_keras_state() -> Iterator[None]:
    keras.utils.set_random_seed(0)
    gradients = _custom_gradients()
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)
    drop_custom_gradients(gradients)
    collect_if_grown()


def _randomize(model: keras.Model, seed: int) -> None:
    """Gives every variable a random value, so no weight is trivially 0 or 1 (conv biases
    and batch-norm statistics would otherwise hide a wrong mapping)."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        shape = tuple(v.shape)
        if v.name in ("gamma", "moving_variance"):
            value = rng.uniform(0.5, 1.5, shape)
        elif v.name in ("beta", "moving_mean", "bias"):
            value = rng.normal(0.0, 0.1, shape)
        else:  # kernels: He-uniform scale keeps activations of order one through the net
            fan_in = int(np.prod(shape[:-1]))
            value = rng.uniform(-1.0, 1.0, shape) * np.sqrt(6.0 / fan_in)
        v.assign(value.astype("float32"))


def _write_legacy_h5(model: keras.Model, path: Path) -> None:
    """Writes `model`'s weights as keras.applications' downloads are laid out (Keras 2).

    Root attributes `layer_names` (every layer, in model order), `backend`, `keras_version`;
    one group per layer with attribute `weight_names` (`layer/var:0`, trainable first) naming
    datasets below it (the `/` makes a subgroup, as h5py and Keras 2 did).
    """
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [layer.name.encode("utf8") for layer in model.layers]
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.2.4"
        for layer in model.layers:
            group = f.create_group(layer.name)
            variables = layer.trainable_weights + layer.non_trainable_weights
            names = [f"{layer.name}/{v.name}:0" for v in variables]
            group.attrs["weight_names"] = [n.encode("utf8") for n in names]
            for name, v in zip(names, variables, strict=True):
                group.create_dataset(name, data=keras.ops.convert_to_numpy(v))


@pytest.fixture(scope="session")
def legacy_h5() -> Callable[[keras.Model, Path, int | None], Path]:
    """`legacy_h5(model, path, seed)`: randomises `model`'s weights (unless `seed` is None) and
    writes them to `path` in the keras.applications legacy HDF5 layout; returns `path`."""

    def make(model: keras.Model, path: Path, seed: int | None = 0) -> Path:
        if seed is not None:
            _randomize(model, seed)
        _write_legacy_h5(model, path)
        return path

    return make
