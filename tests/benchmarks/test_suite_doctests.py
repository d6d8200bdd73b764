"""The examples in the suite's docstrings run and print what they claim."""

from __future__ import annotations

import doctest

import pytest

from throughput_suite import suite, table


@pytest.mark.parametrize(
    "module",
    [
        pytest.param(table, marks=pytest.mark.backend_agnostic),
        pytest.param(suite, marks=pytest.mark.backend_agnostic),
    ],
)
def test_docstring_examples(module):
    outcome = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0
    assert outcome.failed == 0
