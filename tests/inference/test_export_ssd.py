"""The exported SSD: box decoding and NMS in the graph equal the numpy `postprocess`."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from cvbench.detection.anchors import multiscale_anchors
from cvbench.detection.postprocess import postprocess
from cvbench.detection.ssd import build_ssd
from cvbench.inference import ModelInfo
from cvbench.inference.export import export_for_serving, to_tflite
from cvbench.inference.export_info import read_export_info
from cvbench.inference.fold_batchnorm import fold_batchnorm
from cvbench.inference.serving import detections

ANCHORS_64 = multiscale_anchors(64)  # 516 anchors: (8*8 + 4*4 + 2*2 + 1 + 1) * 6
POST = {"iou_threshold": 0.6, "score_threshold": 1e-8, "max_per_class": 100, "max_total": 100}


def ssd_info(**post) -> ModelInfo:
    detection = {"anchors": {}, "scales": [10.0, 10.0, 5.0, 5.0], "postprocess": POST | post}
    return ModelInfo(
        task="detection",
        class_names=("a", "b", "c"),
        image_size=(64, 64),
        resize="stretch",
        detection=detection,
    )


@pytest.fixture(scope="module")
def tiny_ssd():
    """A 64 px ResNet-18 SSD whose predictors spread their outputs: box codes of order one
    (boxes moved and resized around their anchors: many overlaps) and logits over several
    units (scores from about 0.002 to 0.03, not the prior 0.01 everywhere)."""
    keras.utils.set_random_seed(0)  # module scope: set up before the per-test seed
    model = build_ssd(num_classes=3, backbone="resnet18", image_size=64, depth=16, head_layers=2)
    rng = np.random.default_rng(0)
    head = model.get_layer("head")
    for predictor, std in ((head.box_predictor, 0.3), (head.class_predictor, 0.5)):
        kernel, bias = predictor.get_weights()
        predictor.set_weights([rng.normal(0, std, kernel.shape).astype("float32"), bias])
    return model


def assert_same_detections(got: dict, expected: dict) -> None:
    np.testing.assert_array_equal(got["num_detections"], expected["num_detections"])
    np.testing.assert_array_equal(got["detection_classes"], expected["classes"])
    if "detection_class_names" in got:  # the file's names; "" past num_detections
        names = np.array([b"a", b"b", b"c", b""])[expected["classes"]]
        np.testing.assert_array_equal(got["detection_class_names"], names)
    np.testing.assert_allclose(got["detection_boxes"], expected["boxes"], atol=1e-5)
    np.testing.assert_allclose(got["detection_scores"], expected["scores"], atol=1e-5)


@pytest.mark.parametrize("threshold", [None, 0.02])
def test_exported_ssd_equals_numpy_postprocess(tiny_ssd, tmp_path, threshold):
    path = export_for_serving(
        tiny_ssd, tmp_path / "ssd", info=ssd_info(), score_threshold=threshold
    )
    images = np.random.default_rng(1).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    got = {k: v.numpy() for k, v in serve(images=tf.constant(images)).items()}
    assert got["detection_boxes"].shape == (3, 100, 4)
    outputs = tiny_ssd(images.astype("float32"), training=False)
    post = POST | ({} if threshold is None else {"score_threshold": threshold})
    expected = postprocess(outputs["boxes"], outputs["classes"], ANCHORS_64, **post)
    assert_same_detections(got, expected)
    if threshold is None:  # 516 x 3 candidates: the 100 cut binds
        assert (expected["num_detections"] == 100).all()
    else:  # fewer than 100 pass: the padding (0 boxes and scores, class -1) is checked too
        assert 0 < expected["num_detections"].max() < 100
        assert (got["detection_classes"][0, expected["num_detections"][0] :] == -1).all()
    # The folded graph computes the same outputs as the Keras model (to float rounding).
    folded = fold_batchnorm(tiny_ssd)(images.astype("float32"))
    np.testing.assert_allclose(folded["classes"], outputs["classes"], atol=1e-4)


def test_raw_size_images_are_stretched_in_the_graph(tiny_ssd, tmp_path):
    # 50 x 70 images: bilinear to 64 x 64 as the COCO pipeline's `tf.image.resize`; the
    # boxes are normalized, so they hold for the original images too
    path = export_for_serving(tiny_ssd, tmp_path / "ssd", info=ssd_info(), score_threshold=None)
    images = np.random.default_rng(2).integers(0, 256, (2, 50, 70, 3), dtype=np.uint8)
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    got = {k: v.numpy() for k, v in serve(images=tf.constant(images)).items()}
    resized = tf.image.resize(tf.constant(images), [64, 64], method="bilinear")
    outputs = tiny_ssd(resized, training=False)
    expected = postprocess(outputs["boxes"], outputs["classes"], ANCHORS_64, **POST)
    assert_same_detections(got, expected)


def test_the_default_threshold_is_predicts(tiny_ssd, tmp_path):
    # the class logits shifted (through the predictor's bias) so that 60 of the two images'
    # 2 x 516 x 3 candidates score above 0.5: the serving default (predict's 0.5, not the
    # file's COCO 1e-8) keeps some of them (NMS drops overlaps) and none of the rest
    from cvbench.inference.detection import SCORE_THRESHOLD

    assert SCORE_THRESHOLD == 0.5
    images = np.random.default_rng(3).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    logits = np.asarray(tiny_ssd(images.astype("float32"), training=False)["classes"])
    shift = -np.sort(logits.ravel())[-61:-59].mean()  # between the 60th and 61st
    model = keras.models.clone_model(tiny_ssd)
    model.set_weights(tiny_ssd.get_weights())
    predictor = model.get_layer("head").class_predictor
    kernel, bias = predictor.get_weights()
    predictor.set_weights([kernel, bias + shift])
    path = export_for_serving(model, tmp_path / "ssd", info=ssd_info())
    got = tf.saved_model.load(str(path)).signatures["serving_default"](images=tf.constant(images))
    got = {k: v.numpy() for k, v in got.items()}
    outputs = model(images.astype("float32"), training=False)
    expected = postprocess(outputs["boxes"], outputs["classes"], ANCHORS_64,
                           **POST | {"score_threshold": 0.5})  # fmt: skip
    assert_same_detections(got, expected)
    assert expected["num_detections"].min() > 0 and expected["num_detections"].max() < 100


@pytest.mark.parametrize(
    "post",
    [
        POST,
        POST | {"score_threshold": 0.3, "max_per_class": 10, "max_total": 20},
        POST | {"max_per_class": 5, "max_total": 7},
        POST | {"iou_threshold": 0.3, "score_threshold": 0.05},
    ],
)
def test_in_graph_detections_equal_numpy_on_random_outputs(post):
    rng = np.random.default_rng(2)
    codes = rng.normal(0, 1.0, (2, len(ANCHORS_64), 4)).astype("float32")
    logits = rng.normal(-1, 2, (2, len(ANCHORS_64), 4)).astype("float32")
    got = {k: v.numpy() for k, v in detections(codes, logits, ANCHORS_64, **post).items()}
    assert_same_detections(got, postprocess(codes, logits, ANCHORS_64, **post))


@pytest.mark.parametrize("num_classes", [1, 2])
def test_equal_scores_keep_the_same_boxes_as_numpy(num_classes):
    # Codes 0 (boxes = anchors, heavily overlapping) and logits 0 (every score 0.5): which
    # of the tied boxes a cut keeps is postprocess's rule (lower anchor, then lower class,
    # first); tf.image.combined_non_max_suppression kept others.
    codes = np.zeros((1, len(ANCHORS_64), 4), "float32")
    logits = np.zeros((1, len(ANCHORS_64), num_classes), "float32")
    post = POST | {"score_threshold": 0.1, "max_per_class": 7, "max_total": 10}
    got = {k: v.numpy() for k, v in detections(codes, logits, ANCHORS_64, **post).items()}
    expected = postprocess(codes, logits, ANCHORS_64, **post)
    assert expected["num_detections"][0] == min(7 * num_classes, 10)
    assert_same_detections(got, expected)


def test_thresholds_are_strict():
    # Boxes [0, 0, 1, 1] and [0, 0, 1, 0.5] (exact in float32, codes 0 decode to the
    # anchors): IoU = 0.5 / 1 = 0.5, not above iou_threshold 0.5, so both stay; a score of
    # exactly 0.5 (logit 0) is not above score_threshold 0.5, so that class keeps none.
    anchors = np.array([[0, 0, 1, 1], [0, 0, 1, 0.5]], "float32")
    codes = np.zeros((1, 2, 4), "float32")
    logits = np.array([[[2.0, 0.0], [1.0, 0.0]]], "float32")
    post = {"iou_threshold": 0.5, "score_threshold": 0.5, "max_per_class": 5, "max_total": 5}
    got = {k: v.numpy() for k, v in detections(codes, logits, anchors, **post).items()}
    expected = postprocess(codes, logits, anchors, **post)
    assert expected["num_detections"][0] == 2 and list(expected["classes"][0, :2]) == [0, 0]
    assert_same_detections(got, expected)


def test_tflite_postprocessing_equals_numpy(tmp_path):
    # The post-processing graph alone (codes and logits in), converted as the export does:
    # TFLite's built-in NMS gives postprocess's detections. (Not among exactly equal scores:
    # with every score 0.5, TFLite's NMS keeps other boxes than TensorFlow's kernel.)
    post = POST | {"score_threshold": 0.1, "max_per_class": 7, "max_total": 10}
    n = len(ANCHORS_64)
    specs = [tf.TensorSpec((None, n, 4), tf.float32), tf.TensorSpec((None, n, 2), tf.float32)]
    module = tf.Module()
    module.serve = tf.function(lambda c, g: detections(c, g, ANCHORS_64, **post), specs)
    tf.saved_model.save(
        module, str(tmp_path / "post"), signatures={"serving_default": module.serve}
    )
    lite = tmp_path / "post.tflite"
    lite.write_bytes(to_tflite(tmp_path / "post"))
    runner = tf.lite.Interpreter(model_path=str(lite)).get_signature_runner("serving_default")
    rng = np.random.default_rng(5)
    codes = rng.normal(0, 1, (2, n, 4)).astype("float32")
    logits = rng.normal(-1, 2, (2, n, 2)).astype("float32")
    got = runner(c=codes, g=logits)
    assert_same_detections(got, postprocess(codes, logits, ANCHORS_64, **post))


@pytest.mark.slow  # two exports and a TFLite conversion of the SSD: 15-50 s here
def test_tflite_ssd_matches_the_saved_model(tiny_ssd, tmp_path):
    # The whole SSD in TFLite: its convolutions (XNNPACK) round differently from
    # TensorFlow's by about 1e-6, which may swap two detections whose scores are that
    # close; compare each image's detections as a set, scores sorted.
    # the file's threshold (1e-8): 100 detections per image to compare, not a few
    lite = export_for_serving(tiny_ssd, tmp_path / "ssd.tflite", info=ssd_info(), format="tflite",
                              score_threshold=None)  # fmt: skip
    saved = export_for_serving(tiny_ssd, tmp_path / "ssd", info=ssd_info(), score_threshold=None)
    images = np.random.default_rng(4).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    got = tf.lite.Interpreter(model_path=str(lite)).get_signature_runner()(images=images)
    serve = tf.saved_model.load(str(saved)).signatures["serving_default"]
    expected = {k: v.numpy() for k, v in serve(images=tf.constant(images)).items()}
    np.testing.assert_array_equal(got["num_detections"], expected["num_detections"])
    np.testing.assert_allclose(got["detection_scores"], expected["detection_scores"], atol=1e-5)
    for i in range(len(images)):

        def rows(d, i=i):
            boxes = np.round(d["detection_boxes"][i], 4)
            classes = d["detection_classes"][i].tolist()
            return sorted(zip(classes, map(tuple, boxes.tolist()), strict=True))

        assert rows(got) == rows(expected)
    np.testing.assert_array_equal(
        np.sort(got["detection_class_names"], axis=-1),
        np.sort(expected["detection_class_names"].astype(object), axis=-1),
    )
    # both carry the file's ModelInfo: names, input size, anchors, coder, NMS settings
    assert read_export_info(lite) == read_export_info(saved) == ssd_info()


def test_the_export_states_the_threshold_it_applies(tiny_ssd, tmp_path):
    lite = export_for_serving(tiny_ssd, tmp_path / "ssd.tflite", info=ssd_info(), format="tflite")
    served = read_export_info(lite)  # the default: predict's 0.5, not the file's 1e-8
    assert served == ssd_info(score_threshold=0.5) != ssd_info()
    assert served.detection["postprocess"]["score_threshold"] == 0.5
