"""Drawing: PNGs of the original size, boxes where the detections are, captions, names."""

from __future__ import annotations

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info, constant_detector, detector_info
from PIL import Image

from cvbench.inference.classification import classify
from cvbench.inference.detection import detect
from cvbench.inference.draw import PALETTE, draw_detection, draw_results

pytestmark = pytest.mark.backend_agnostic


def test_detection_pngs_have_the_original_size_and_the_boxes(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.zeros((100, 200, 3), np.uint8)).save(images / "wide.png")
    Image.fromarray(np.zeros((50, 40, 3), np.uint8)).save(images / "small.jpg")
    dets = detect(constant_detector(), images, info=detector_info())
    written = draw_results(dets, images, tmp_path / "drawn")
    assert written == [tmp_path / "drawn" / "small.png", tmp_path / "drawn" / "wide.png"]
    wide = np.asarray(Image.open(written[1]))
    assert wide.shape == (100, 200, 3)
    # Outlines 1 pixel wide (min(100, 200) // 100) on the corners, inclusive: the class-0 box
    # (xyxy [100, 50, 200, 100]) has its left edge at x = 100 in PALETTE[0] (below the
    # label); the class-1 box [0, 0, 100, 50] its bottom edge at y = 50 in PALETTE[1].
    assert tuple(wide[90, 100]) == PALETTE[0]
    assert tuple(wide[50, 60]) == PALETTE[1]
    assert tuple(wide[75, 50]) == (0, 0, 0)  # inside no box: untouched
    assert Image.open(written[0]).size == (40, 50)


def test_classification_caption_and_index_names(tmp_path):
    image = np.full((40, 60, 3), 128, np.uint8)
    results = classify(channel_classifier(), [image, image], info=classifier_info(), top_k=2)
    written = draw_results(results, [image, image], tmp_path)
    assert [p.name for p in written] == ["000000.png", "000001.png"]
    picture = np.asarray(Image.open(written[0]))
    assert picture.shape == (40, 60, 3)
    assert (picture[:6, :20] != 128).any()  # the caption, top left
    np.testing.assert_array_equal(picture[30:, 40:], 128)  # the rest untouched


def test_same_stems_get_distinct_names(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / folder / "x.png")
    inputs = [tmp_path / "a", tmp_path / "b"]
    dets = detect(constant_detector(), inputs, info=detector_info())
    assert [p.name for p in draw_results(dets, inputs, tmp_path / "out")] == ["x.png", "x-1.png"]


def test_draw_detection_leaves_the_input_alone_and_inputs_must_match():
    image = np.zeros((64, 64, 3), np.uint8)
    (det,) = detect(constant_detector(), image, info=detector_info())
    picture = draw_detection(image, det)
    assert picture.size == (64, 64) and not image.any()
    with pytest.raises(ValueError, match="inputs give image None where the results have 0"):
        draw_results([det], np.zeros((0, 64, 64, 3)), "unused")
