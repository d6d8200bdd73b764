"""The one batch loop of inference (`images.predict_batches`): what it feeds the model, what
it hands `results_of`, and that `classify` and `detect` both run through it."""

from __future__ import annotations

import numpy as np
import pytest
from inference_models import (
    channel_classifier,
    classifier_info,
    constant_detector,
    detector_info,
)
from PIL import Image

from cvbench.inference import classification, detection, images
from cvbench.inference.images import ReadOptions, predict_batches


class _Recorder:
    """A stand-in model: records the batch shapes it is given, returns the batch's first
    pixel per image (so a result can be traced back to its image)."""

    def __init__(self):
        self.shapes = []

    def predict_on_batch(self, x):
        self.shapes.append(x.shape)
        return x[:, 0, 0, 0]


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    ("batch_size", "expected_batches"),
    # 5 images: batches of 2 -> 2 + 2 + 1; of 5 or more -> one batch of 5.
    [(1, [1, 1, 1, 1, 1]), (2, [2, 2, 1]), (5, [5]), (8, [5])],
)
def test_batches_in_input_order(batch_size, expected_batches):
    info = classifier_info()  # 8 x 8, center_crop at 1.0: a constant image stays constant
    stack = np.stack([np.full((8, 8, 3), 10 * i, np.uint8) for i in range(5)])
    model = _Recorder()
    seen = []

    def results_of(outputs, batch):
        seen.append(batch.sources)
        pairs = zip(batch.sources, outputs, strict=True)
        return [(source, float(value)) for source, value in pairs]

    results = predict_batches(model, stack, info, results_of, read=ReadOptions(batch_size))
    assert [shape[0] for shape in model.shapes] == expected_batches
    assert all(shape[1:] == (8, 8, 3) for shape in model.shapes)
    # Each image's first pixel (10 * i) comes back beside its index, in order.
    assert results == [(i, 10.0 * i) for i in range(5)]
    assert [s for sources in seen for s in sources] == [0, 1, 2, 3, 4]


@pytest.mark.backend_agnostic
def test_read_options_reach_the_reader(tmp_path):
    good = tmp_path / "a.png"

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(good)
    (tmp_path / "b.png").write_bytes(b"not an image")
    skipped = []
    read = ReadOptions(4, skip_corrupt=True, on_skip=skipped.append)
    results = predict_batches(
        _Recorder(), tmp_path, classifier_info(), lambda out, b: list(b.sources), read=read
    )
    assert results == [str(good)]
    assert len(skipped) == 1 and "b.png" in str(skipped[0])
    with pytest.raises(images.ImageFileError, match="b.png"):
        predict_batches(
            _Recorder(), tmp_path, classifier_info(), lambda o, b: [], read=ReadOptions(4)
        )


@pytest.mark.backend_agnostic
def test_bad_batch_size_named():
    with pytest.raises(ValueError, match="batch_size must be an int >= 1; got 0"):
        predict_batches(
            _Recorder(), np.zeros((8, 8, 3)), classifier_info(), None, read=ReadOptions(0)
        )


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    ("module", "call"),
    [
        (
            classification,
            lambda: classification.classify(
                channel_classifier(), np.zeros((3, 8, 8, 3)), info=classifier_info(), batch_size=2
            ),
        ),
        (
            detection,
            lambda: detection.detect(
                constant_detector(), np.zeros((3, 64, 64, 3)), info=detector_info(), batch_size=2
            ),
        ),
    ],
    ids=["classify", "detect"],
)
def test_classify_and_detect_share_the_loop(monkeypatch, module, call):
    calls = []

    def spy(model, inputs, info, results_of, *, read):
        calls.append(read)
        return predict_batches(model, inputs, info, results_of, read=read)

    monkeypatch.setattr(module, "predict_batches", spy)
    results = call()
    assert calls == [ReadOptions(2)]
    assert [r.source for r in results] == [0, 1, 2]
