"""The demo's classifier is scored by eval's and training validation's top-1
(`cvbench.tasks.classification.top_k_accuracy(1, "top1")`): a non-finite logit row counts
as wrong on both backends (Keras' `SparseCategoricalAccuracy` took a NaN row for class 0
on TensorFlow), and finite outputs score as before."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.demo.classify import classification_task
from cvbench.demo.config import DemoConfig
from cvbench.demo.data import DemoData
from cvbench.tasks.classification import FiniteTopKAccuracy

pytestmark = pytest.mark.backend_agnostic


def _top1(tmp_path):
    task = classification_task(DemoData.under(tmp_path), DemoConfig())
    (metric,) = task.metrics()
    return metric


def test_the_demo_scores_with_evals_top1(tmp_path):
    metric = _top1(tmp_path)
    assert isinstance(metric, FiniteTopKAccuracy)
    assert (metric.name, metric.k) == ("top1", 1)


def test_a_nan_row_is_wrong_and_finite_rows_score_as_keras(tmp_path):
    # labels 0, 0, 1: row 0 right (arg max 0), row 1 NaN (Keras' own metric on TensorFlow
    # took its arg max for class 0: right), row 2 right (arg max 1): 2 of 3 = 0.666667
    labels = np.array([0, 0, 1])
    logits = np.array([[2.0, 1.0], [np.nan, 0.0], [0.0, 3.0]], np.float32)
    metric = _top1(tmp_path)
    metric.update_state(labels, logits)
    assert float(metric.result()) == pytest.approx(2 / 3)
    # finite outputs: the same number as Keras' metric (ties to the lower class: row 1
    # [1, 1] with label 0 right; row 2 wrong): 2 of 3 either way
    finite = np.array([[2.0, 1.0], [1.0, 1.0], [3.0, 0.0]], np.float32)
    ours, keras_own = _top1(tmp_path), keras.metrics.SparseCategoricalAccuracy()
    for m in (ours, keras_own):
        m.update_state(labels, finite)
    assert float(ours.result()) == float(keras_own.result()) == pytest.approx(2 / 3)
