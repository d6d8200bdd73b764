"""The examples in `cvbench.benchmark`'s docstrings run and print what they claim."""

from __future__ import annotations

import doctest

import pytest

from cvbench.benchmark import latency, results, steps, table

pytestmark = pytest.mark.backend_agnostic


@pytest.mark.parametrize("module", [latency, results, steps, table])
def test_docstring_examples(module):
    outcome = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0
    assert outcome.failed == 0
