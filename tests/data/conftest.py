"""Fixtures of the data tests: TensorFlow and the preprocessing module, imported on first use
(the data package itself imports no TensorFlow, and some tests here run without it)."""

import pytest


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


@pytest.fixture(scope="module")
def pp():
    from cvbench.data.read import preprocessing

    return preprocessing
