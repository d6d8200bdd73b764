"""Shared test setup: every test starts from the same seed, a fresh Keras session and the
float32 dtype policy (a test that sets a mixed policy cannot leak it into the next one)."""

from __future__ import annotations

from collections.abc import Iterator

import keras
import pytest


@pytest.fixture(autouse=True)
def _fresh_keras_state() -> Iterator[None]:
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)
