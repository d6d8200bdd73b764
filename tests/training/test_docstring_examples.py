"""The examples in the training modules' docstrings run and print what they claim."""

import doctest

import pytest

from cvbench.training import losses, optimizers, precision, schedules, throughput, trainer


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("module", [losses, optimizers, precision, schedules, throughput, trainer])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
