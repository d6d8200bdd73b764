"""The examples in the inference modules' docstrings run and print what they claim."""

import doctest

import pytest

from cvbench.inference import box_formats, classification, images

pytestmark = pytest.mark.backend_agnostic


@pytest.mark.parametrize("module", [box_formats, classification, images])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
