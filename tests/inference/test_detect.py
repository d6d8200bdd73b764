"""`detect`: exact pixel boxes in every format from a detector whose outputs are fixed, the
tiny SSD end to end, the COCO results file."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from inference_models import DETECTOR_NAMES, classifier_info, constant_detector, detector_info
from PIL import Image

from cvbench.detection.anchors import multiscale_anchors
from cvbench.detection.postprocess import postprocess
from cvbench.inference import save_model
from cvbench.inference.box_formats import from_yxyx, to_yxyx
from cvbench.inference.coco_results import coco_results, write_coco_results
from cvbench.inference.detection import detect

SIG2, SIG1, SIG_1 = (1 / (1 + math.exp(-x)) for x in (2.0, 1.0, -1.0))
# The detector's boxes are its anchors (box codes 0): anchor 0 = [0, 0, .5, .5] (class 1,
# sigmoid(2)), anchor 3 = [.5, .5, 1, 1] (class 0, sigmoid(1)), anchor 1 = [0, .5, .5, 1]
# (class 0, sigmoid(-1)). On a 100 x 200 (height x width) image, stretched to 64 x 64 and
# back, normalized y scales by 100 and x by 200: pixel [ymin, xmin, ymax, xmax] =
YXYX = np.array([[0, 0, 50, 100], [50, 100, 100, 200], [0, 100, 50, 200]], np.float32)
EXPECTED = {
    "yxyx": YXYX,
    "xyxy": np.array([[0, 0, 100, 50], [100, 50, 200, 100], [100, 0, 200, 50]], np.float32),
    "xywh": np.array([[0, 0, 100, 50], [100, 50, 100, 50], [100, 0, 100, 50]], np.float32),
}


def _image(height=100, width=200):
    return np.zeros((height, width, 3), np.uint8)


@pytest.mark.backend_agnostic
def test_anchors_of_the_test_detector_are_the_four_quarters():
    anchors = multiscale_anchors((64, 64), **detector_info().detection["anchors"])
    np.testing.assert_array_equal(
        anchors, [[0, 0, 0.5, 0.5], [0, 0.5, 0.5, 1], [0.5, 0, 1, 0.5], [0.5, 0.5, 1, 1]]
    )


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("box_format", ["xyxy", "xywh", "yxyx"])
def test_boxes_in_original_pixels_in_each_format(box_format):
    (det,) = detect(
        constant_detector(),
        _image(),
        info=detector_info(),
        score_threshold=0.2,
        box_format=box_format,
    )
    assert det.source == 0 and det.image_size == (100, 200) and det.box_format == box_format
    np.testing.assert_allclose(det.boxes, EXPECTED[box_format], atol=1e-4)
    np.testing.assert_allclose(det.scores, [SIG2, SIG1, SIG_1], rtol=1e-6)
    assert det.class_ids.tolist() == [1, 0, 0]
    assert det.class_names == ("square", "circle", "circle")


@pytest.mark.backend_agnostic
def test_default_format_is_xyxy_and_threshold_filters():
    (det,) = detect(constant_detector(), _image(), info=detector_info())  # threshold 0.5
    assert det.box_format == "xyxy"
    np.testing.assert_allclose(det.boxes, EXPECTED["xyxy"][:2], atol=1e-4)
    (det,) = detect(constant_detector(), _image(), info=detector_info(), score_threshold=0.8)
    assert det.class_names == ("square",)
    (det,) = detect(constant_detector(), _image(), info=detector_info(), score_threshold=0.9)
    assert det.boxes.shape == (0, 4) and det.class_names == ()


@pytest.mark.backend_agnostic
def test_box_format_conversions_are_inverse():
    for box_format, boxes in EXPECTED.items():
        np.testing.assert_array_equal(from_yxyx(YXYX, box_format), boxes)
        np.testing.assert_array_equal(to_yxyx(boxes, box_format), YXYX)


@pytest.mark.backend_agnostic
def test_center_crop_detector_maps_boxes_through_the_crop():
    # 64 x 128 at (64, 64) / 1.0: no resize, crop columns 32..95 (left offset 32). Anchor 0,
    # model pixels [0, 0, 32, 32], is original [0, 32, 32, 64] (yxyx).
    info = detector_info(resize="center_crop", crop_fraction=1.0)
    (det,) = detect(constant_detector(), _image(64, 128), info=info, box_format="yxyx")
    np.testing.assert_allclose(det.boxes[0], [0, 32, 32, 64], atol=1e-4)


def test_from_a_model_file_on_a_folder_with_batches(tmp_path):
    path = save_model(constant_detector(), tmp_path / "det.keras", detector_info())
    images = tmp_path / "images"
    images.mkdir()
    for name, (h, w) in {"1.png": (100, 200), "2.png": (50, 40), "3.png": (64, 64)}.items():
        Image.fromarray(_image(h, w)).save(images / name)
    dets = detect(path, images, batch_size=2)
    assert [(d.source, d.image_size) for d in dets] == [
        (str(images / "1.png"), (100, 200)),
        (str(images / "2.png"), (50, 40)),
        (str(images / "3.png"), (64, 64)),
    ]
    np.testing.assert_allclose(dets[0].boxes, EXPECTED["xyxy"][:2], atol=1e-4)
    # 50 x 40: anchor 3 is [20, 25, 40, 50] in xyxy.
    np.testing.assert_allclose(dets[1].boxes[1], [20, 25, 40, 50], atol=1e-4)


def test_tiny_ssd_equals_postprocess_scaled_to_each_image():
    from cvbench.detection.ssd import build_ssd
    from cvbench.inference.resolve import default_info

    model = build_ssd(num_classes=2, backbone="resnet18", image_size=64, depth=16, head_layers=1)
    rng = np.random.default_rng(0)
    images = [rng.uniform(0, 255, (48, 80, 3)), rng.uniform(0, 255, (64, 64, 3))]
    info = default_info(model, task="detection")
    dets = detect(model, images, info=info, score_threshold=0.0, box_format="yxyx")
    import tensorflow as tf

    # the COCO evaluation pipeline's resize (`cvbench.data.read.coco`): bilinear tf.image
    stretched = tf.image.resize(images[0].astype(np.float32), [64, 64], "bilinear").numpy()
    batch = np.stack([stretched, images[1]]).astype(np.float32)
    outputs = model.predict_on_batch(batch)
    anchors = multiscale_anchors(64, **info.detection["anchors"])
    want = postprocess(outputs["boxes"], outputs["classes"], anchors)
    for i, (h, w) in enumerate([(48, 80), (64, 64)]):
        k = int(want["num_detections"][i])
        assert k > 0 and len(dets[i].scores) == k
        np.testing.assert_allclose(
            dets[i].boxes, want["boxes"][i, :k] * [h, w, h, w], rtol=1e-4, atol=1e-3
        )
        np.testing.assert_allclose(dets[i].scores, want["scores"][i, :k], rtol=1e-5)
        assert dets[i].class_ids.tolist() == want["classes"][i, :k].tolist()


def test_coco_results_ids_and_xywh_boxes(tmp_path):
    images = tmp_path / "val2017"
    images.mkdir()
    Image.fromarray(_image()).save(images / "000000000042.png")
    Image.fromarray(_image()).save(images / "000000000007.png")
    dets = detect(
        constant_detector(), images, info=detector_info(), box_format="yxyx", score_threshold=0.5
    )
    path = write_coco_results(dets, tmp_path / "out" / "results.json", class_names=DETECTOR_NAMES)
    results = json.loads(path.read_text())
    # Sorted file names: 7 first; classes "circle", "square" are not COCO names: index + 1.
    assert results[:2] == [
        {"image_id": 7, "category_id": 2, "bbox": [0.0, 0.0, 100.0, 50.0], "score": 0.8808},
        {"image_id": 7, "category_id": 1, "bbox": [100.0, 50.0, 100.0, 50.0], "score": 0.73106},
    ]
    assert [r["image_id"] for r in results] == [7, 7, 42, 42]
    coco_info = dataclasses.replace(detector_info(), class_names=("person", "dog"))
    coco_dets = detect(constant_detector(), images, info=coco_info, score_threshold=0.5)
    coco_named = coco_results(coco_dets, class_names=coco_info.class_names)
    assert [r["category_id"] for r in coco_named[:2]] == [18, 1]  # "dog" 18, "person" 1
    arrays = detect(constant_detector(), [_image()] * 2, info=detector_info())
    assert [r["image_id"] for r in coco_results(arrays, class_names=DETECTOR_NAMES)] == [
        0,
        0,
        1,
        1,
    ]
    explicit = coco_results(
        arrays, class_names=DETECTOR_NAMES, image_ids=[5, 6], category_ids=[11, 12]
    )
    assert [(r["image_id"], r["category_id"]) for r in explicit[:2]] == [(5, 12), (5, 11)]
    with pytest.raises(ValueError, match="need 2 image ids; got 1"):
        coco_results(arrays, class_names=DETECTOR_NAMES, image_ids=[1])


@pytest.mark.backend_agnostic
def test_errors():
    model = constant_detector()
    with pytest.raises(ValueError, match="box_format must be one of .*got 'ltrb'"):
        detect(model, _image(), info=detector_info(), box_format="ltrb")
    with pytest.raises(ValueError, match=r"score_threshold must be in \[0, 1\); got 1.5"):
        detect(model, _image(), info=detector_info(), score_threshold=1.5)
    with pytest.raises(ValueError, match="is a classification model"):
        detect(model, _image(), info=classifier_info())
