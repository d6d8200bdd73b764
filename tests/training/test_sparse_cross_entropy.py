"""SparseCrossEntropy: exact values with and without label smoothing."""

import math

import numpy as np
import pytest

from cvbench.training.losses import SparseCrossEntropy


@pytest.mark.backend_agnostic
def test_values_with_and_without_smoothing():
    logits = np.log(np.array([[1.0, 3.0]], "float32"))  # softmax (1/4, 3/4)
    assert float(SparseCrossEntropy()([1], logits)) == pytest.approx(-math.log(0.75))
    # s = 0.2 over 2 classes: target (0.1, 0.9).
    smoothed = -(0.1 * math.log(0.25) + 0.9 * math.log(0.75))
    assert float(SparseCrossEntropy(0.2)([1], logits)) == pytest.approx(smoothed)
