"""`classify` ranks no class for an image whose logits are not all finite (probe fa49 #2:
NaN logits came back as `class_ids=(0, 1), scores=(nan, nan)`): its result is empty, as
evaluation counts such an output wrong; the other images of the batch are unaffected."""

from __future__ import annotations

import json

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info
from PIL import Image

import cvbench.cli as cli
from cvbench.inference import classify, save_model

pytestmark = pytest.mark.backend_agnostic


def _overflowing_classifier():
    """logits = 0.1 * channel means, but the red weight 1e38: a red mean of 255 gives
    255e38, over float32's 3.4e38: +inf; a red mean of 0 gives 0 (finite)."""
    model = channel_classifier()
    kernel = 0.1 * np.eye(3, dtype="float32")
    kernel[0, 0] = 1e38
    model.get_layer("logits").set_weights([kernel, np.zeros(3, "float32")])
    return model


@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_non_finite_row_ranks_no_class(batch_size):
    images = np.zeros((2, 8, 8, 3), np.float32)
    images[0, ..., 1] = 50.0  # logits (0, 5, 0): green, then red (ties: lower index)
    images[1, ..., 0] = 255.0  # logits (inf, 0, 0)
    got = classify(
        _overflowing_classifier(), images, info=classifier_info(), top_k=2, batch_size=batch_size
    )
    assert got[0].class_names == ("green", "red")
    # softmax of (0, 5, 0): e^5 / (e^5 + 2) = 148.413 / 150.413 = 0.986703; 1 / 150.413
    assert got[0].scores == pytest.approx((0.986703, 0.006648), abs=1e-6)
    assert (got[1].class_ids, got[1].class_names, got[1].scores) == ((), (), ())
    assert got[1].to_dict()["classes"] == []


def test_nan_logits_rank_no_class_and_predict_says_so(tmp_path, capsys):
    model = channel_classifier()
    model.get_layer("logits").set_weights([np.full((3, 3), np.nan, "float32"), np.zeros(3)])
    path = save_model(model, tmp_path / "nan.keras", classifier_info())
    (got,) = classify(path, np.zeros((8, 8, 3), np.float32))
    assert (got.class_ids, got.scores) == ((), ())
    image = tmp_path / "a.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    assert cli.main(["predict", str(path), str(image)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"{image}  no class (the model output NaN or infinite logits)"
    )
    assert cli.main(["predict", str(path), str(image), "--json"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert json.loads(line)["classes"] == []
