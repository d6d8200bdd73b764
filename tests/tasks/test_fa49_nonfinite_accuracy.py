"""A row of logits with NaN or inf is never a correct prediction, on both backends, in the
task's evaluation and the training's validation alike (`top_k_accuracy`), and `cvbench eval`
says how many images had such outputs (probe fa49 #2: top-1 was the share of class 0, top-5
0.0 on TensorFlow but 1.0 on JAX, exit 0, no warning)."""

from __future__ import annotations

import json
import warnings

import keras
import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info

import cvbench.cli as cli
from cvbench.inference import save_model
from cvbench.tasks.classification import FiniteTopKAccuracy, top_k_accuracy

pytestmark = pytest.mark.backend_agnostic
NAN, INF = np.nan, np.inf
# 6 rows of 3 classes, labels 0, 1, 2, 0, 1, 0
LOGITS = np.array(
    [
        [2.0, 1.0, 0.0],  # right (class 0 best)
        [0.0, 3.0, 1.0],  # right
        [3.0, 2.0, 1.0],  # wrong at top-1 (class 2 is last); top-5 right (3 classes)
        [NAN, NAN, NAN],  # never right (TensorFlow's arg max took it for class 0)
        [0.0, INF, 0.0],  # an inf is broken too: never right
        [-INF, 1.0, 0.0],  # likewise a -inf
    ],
    np.float32,
)
LABELS = np.array([0, 1, 2, 0, 1, 0])


def _state(metric):
    return float(metric.result()), int(keras.ops.convert_to_numpy(metric.nonfinite.value))


@pytest.mark.parametrize(("k", "expected"), [(1, 2 / 6), (5, 3 / 6)])
def test_a_non_finite_row_is_never_right(k, expected):
    metric = top_k_accuracy(k, "acc")
    metric.update_state(LABELS, LOGITS)
    # top-1: rows 0, 1; top-5: rows 0, 1, 2 (every class of the 3 is in the top 5)
    assert _state(metric) == (pytest.approx(expected), 3)  # rows 3, 4, 5 not finite


@pytest.mark.parametrize("k", [1, 5])
def test_finite_rows_score_as_keras_scores_them(k):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(16, 7)).astype("float32")
    labels = rng.integers(0, 7, 16)
    ours = top_k_accuracy(k, "acc")
    theirs = (
        keras.metrics.SparseCategoricalAccuracy()
        if k == 1
        else keras.metrics.SparseTopKCategoricalAccuracy(k=k)
    )
    ours.update_state(labels, logits)
    theirs.update_state(labels, logits)
    assert float(ours.result()) == pytest.approx(float(theirs.result()))
    assert _state(ours)[1] == 0


def test_weights_count_and_padding_is_no_broken_image():
    metric = top_k_accuracy(1, "acc")
    weights = np.array([1, 1, 1, 0, 1, 1], np.float32)  # row 3 (NaN) is padding
    metric.update_state(LABELS, LOGITS, sample_weight=weights)
    assert _state(metric) == (pytest.approx(2 / 5), 2)  # rows 0, 1 right of 5; rows 4, 5 broken
    metric.reset_state()
    assert _state(metric) == (0.0, 0)


def test_soft_labels_score_their_dominant_class():
    soft = np.eye(3, dtype="float32")[LABELS] * 0.8 + 0.2 / 3  # mixup-like
    metric = top_k_accuracy(1, "acc")
    metric.update_state(soft, LOGITS)
    assert _state(metric) == (pytest.approx(2 / 6), 3)


def test_the_metric_round_trips_its_config():
    metric = FiniteTopKAccuracy.from_config(top_k_accuracy(5, "top5").get_config())
    assert (metric.k, metric.name) == (5, "top5")


def test_compiled_evaluation_agrees_on_both_backends():
    # The path of Trainer.evaluate: a compiled model's evaluate (stateless on JAX).
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Identity()(inputs))
    metrics = [top_k_accuracy(1, "top1"), top_k_accuracy(5, "top5")]
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(loss=loss, weighted_metrics=metrics)
    results = model.evaluate(LOGITS, LABELS, batch_size=4, verbose=0, return_dict=True)
    assert results["top1"] == pytest.approx(2 / 6) and results["top5"] == pytest.approx(3 / 6)
    assert [_state(m)[1] for m in metrics] == [3, 3]  # the instances hold the counts


@pytest.fixture(scope="module")
def nan_classifier(tmp_path_factory):
    """The tiny 3-class classifier with NaN logits, and 6 validation records."""
    from jpeg_records import write_jpeg_records

    folder = tmp_path_factory.mktemp("fa49")
    model = channel_classifier()
    layer = model.get_layer("logits")
    layer.set_weights([np.full((3, 3), NAN, "float32"), np.zeros(3, "float32")])
    path = save_model(model, folder / "nan.keras", classifier_info())
    data = folder / "rec"
    data.mkdir()
    write_jpeg_records(data / "validation-00000-of-00001", 6, num_classes=3, prefix="validation")
    return path, data


@pytest.mark.parametrize("batch", ["4", "6"])
def test_cvbench_eval_of_nan_logits_warns_and_scores_zero(nan_classifier, tmp_path, capsys, batch):
    path, data = nan_classifier
    out = tmp_path / "r.json"
    argv = ["eval", "--checkpoint", str(path), "--data-dir", str(data), "--batch-size", batch,
            "--model", "resnet18", "--num-classes", "3", "--image-size", "8",
            "--precision", "fp32", "--json", str(out),
            "--log-dir", str(tmp_path / "ev")]  # fmt: skip
    with pytest.warns(UserWarning) as record:
        assert cli.main(argv) == 0
    printed, _ = capsys.readouterr()
    (warned,) = [w for w in record if "logits" in str(w.message)]  # one warning
    with cli.warning_lines("eval"):  # what the CLI prints of it (pytest captures warnings)
        line = warnings.formatwarning(warned.message, warned.category, warned.filename, 1)
    assert line == (
        "cvbench eval: warning: 6 image(s) had NaN or infinite logits: counted as wrong "
        "predictions (the model's outputs are broken)\n"
    )
    assert "top1: 0\n" in printed and "top5" not in printed  # 3 classes: no top-5

    def refuse(name):
        raise ValueError(name)

    expected = {"loss": None, "top1": 0.0}  # NaN: strict JSON (probe fa49 #3)
    assert json.loads(out.read_text(), parse_constant=refuse) == expected
    record = json.loads((tmp_path / "ev" / "results.json").read_text(), parse_constant=refuse)
    assert record["metrics"] == expected
