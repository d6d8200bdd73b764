"""SSD exports agree: the SavedModel and the TFLite file of one model give the same
detections (count, boxes, scores, classes, names) as the numpy `postprocess`, on images
with 0, 1 and many detections (#39). TFLite's NMS returns `max_output_size` entries
whatever it keeps: a graph sized by the unpadded op's shape counted the padding as
detections of class 0 (100 detections, class 0 and its name, where the SavedModel had 0)."""

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
from cvbench.inference.serving import detections

ANCHORS = multiscale_anchors(64)
POST = {"iou_threshold": 0.6, "score_threshold": 0.5, "max_per_class": 100, "max_total": 100}
NAMES = np.array([b"a", b"b", b"c", b""])  # "" past num_detections


def info() -> ModelInfo:
    detection = {"anchors": {}, "scales": [10.0, 10.0, 5.0, 5.0], "postprocess": POST}
    return ModelInfo(task="detection", class_names=("a", "b", "c"), image_size=(64, 64),
                     resize="stretch", detection=detection)  # fmt: skip


def check(got: dict, expected: dict, counts: list[int]) -> None:
    np.testing.assert_array_equal(got["num_detections"], counts)
    np.testing.assert_array_equal(got["num_detections"], expected["num_detections"])
    np.testing.assert_array_equal(got["detection_classes"], expected["classes"])
    np.testing.assert_array_equal(got["detection_class_names"], NAMES[expected["classes"]])
    np.testing.assert_allclose(got["detection_boxes"], expected["boxes"], atol=1e-5)
    np.testing.assert_allclose(got["detection_scores"], expected["scores"], atol=1e-5)


@pytest.fixture(scope="module")
def model_and_images():
    """A 64 px SSD whose class bias puts image 0 under the 0.5 threshold everywhere, gives
    image 1 exactly one candidate above it and image 2 many (box codes of order one: real
    overlaps, no IoU exactly at the threshold as anchors on a grid have).

    The images are constant grays 0, 128 and 255 plus noise; the bias shift c is chosen
    from their logits (margins of 0.05 in logit: far above the folded graph's 1e-4; a
    class kernel of std 4 spreads the three images' logits apart)."""
    keras.utils.set_random_seed(0)
    model = build_ssd(num_classes=3, backbone="resnet18", image_size=64, depth=16, head_layers=2)
    rng = np.random.default_rng(0)
    head = model.get_layer("head")
    for predictor, std in ((head.box_predictor, 0.3), (head.class_predictor, 4.0)):
        kernel, bias = predictor.get_weights()
        predictor.set_weights([rng.normal(0, std, kernel.shape).astype("float32"), bias])
    noise = rng.integers(-20, 21, (3, 64, 64, 3))
    images = np.clip(np.array([0, 128, 255])[:, None, None, None] + noise, 0, 255)
    images = images.astype(np.uint8)
    logits = np.asarray(model(images.astype("float32"), training=False)["classes"])
    ranked = [np.sort(logits[i].ravel())[::-1] for i in range(3)]
    order = np.argsort([r[0] for r in ranked])  # by each image's best logit
    low, one, many = (ranked[i] for i in order)
    # a cut c with low[0] < c, one[1] < c < one[0], and many above it
    c = (max(low[0], one[1]) + one[0]) / 2
    assert c - max(low[0], one[1]) > 0.05 and one[0] - c > 0.05, (low[:2], one[:2])
    assert (many > c + 0.05).sum() >= 5, many[:12]
    kernel, bias = head.class_predictor.get_weights()
    head.class_predictor.set_weights([kernel, bias - c])  # the logit c becomes 0: score 0.5
    return model, images[order]


def test_the_post_processing_graph_counts_no_padding_in_tflite(tmp_path):
    # codes 0 (boxes are the anchors), logits -10 (score 5e-5) but: image 1 one anchor of
    # class 1 at 3, image 2 fifty class-0 anchors at distinct logits (NMS keeps some)
    n = len(ANCHORS)
    specs = [tf.TensorSpec((None, n, 4), tf.float32), tf.TensorSpec((None, n, 3), tf.float32)]
    module = tf.Module()
    module.serve = tf.function(lambda c, g: detections(c, g, ANCHORS, **POST), specs)
    tf.saved_model.save(module, str(tmp_path / "p"), signatures={"serving_default": module.serve})
    lite = tf.lite.Interpreter(model_content=to_tflite(tmp_path / "p")).get_signature_runner()
    rng = np.random.default_rng(1)
    codes = rng.normal(0, 0.3, (3, n, 4)).astype("float32")
    logits = np.full((3, n, 3), -10.0, "float32")
    logits[1, 5, 1] = 3.0
    logits[2, :50, 0] = 3.0 + 0.01 * np.arange(50)
    expected = postprocess(codes, logits, ANCHORS, **POST)
    counts = list(expected["num_detections"])
    assert counts[:2] == [0, 1] and counts[2] > 1
    for got in (lite(c=codes, g=logits), module.serve(codes, logits)):
        got = {k: np.asarray(v) for k, v in got.items()}
        got["detection_class_names"] = NAMES[got["detection_classes"]]
        check(got, expected, counts)
        assert (got["detection_classes"][0] == -1).all()  # padding: -1, not class 0
        assert (got["detection_scores"][0] == 0).all() and (got["detection_boxes"][0] == 0).all()


@pytest.mark.heavy  # an SSD export in both formats (a TFLite conversion): 35-45 s on 2 busy cores
def test_saved_model_and_tflite_agree_on_0_1_and_many_detections(model_and_images, tmp_path):
    model, images = model_and_images
    saved = export_for_serving(model, tmp_path / "ssd", info=info())
    lite = export_for_serving(model, tmp_path / "ssd.tflite", info=info(), format="tflite")
    # side by side, each with its own info file
    assert (tmp_path / "ssd_info.json").is_file() and (tmp_path / "ssd_tflite_info.json").is_file()
    outputs = model(images.astype("float32"), training=False)
    expected = postprocess(outputs["boxes"], outputs["classes"], ANCHORS, **POST)
    counts = list(expected["num_detections"])
    assert counts[:2] == [0, 1] and 1 < counts[2] < 100, counts
    serve = tf.saved_model.load(str(saved)).signatures["serving_default"]
    got_saved = {k: v.numpy() for k, v in serve(images=tf.constant(images)).items()}
    got_lite = tf.lite.Interpreter(model_path=str(lite)).get_signature_runner()(images=images)
    for got in (got_saved, got_lite):
        check(got, expected, counts)


@pytest.mark.heavy
def test_onnx_agrees_on_0_1_and_many_detections(model_and_images, tmp_path):
    # runs where tf2onnx and onnxruntime are installed (not cvbench dependencies)
    pytest.importorskip("tf2onnx")
    ort = pytest.importorskip("onnxruntime")
    import subprocess
    import sys

    model, images = model_and_images
    saved = export_for_serving(model, tmp_path / "ssd", info=info())
    onnx_path = tmp_path / "ssd.onnx"
    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved),
                    "--output", str(onnx_path)], check=True, capture_output=True)  # fmt: skip
    session = ort.InferenceSession(str(onnx_path))
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, {session.get_inputs()[0].name: images}), strict=True))
    got = {k.split(":")[0]: v for k, v in got.items()}
    got["detection_class_names"] = got["detection_class_names"].astype(bytes)
    outputs = model(images.astype("float32"), training=False)
    expected = postprocess(outputs["boxes"], outputs["classes"], ANCHORS, **POST)
    check(got, expected, list(expected["num_detections"]))
