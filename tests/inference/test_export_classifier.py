"""The exported classifier: uint8 images of any size in (resized and cropped in the graph by
the file's rule, with the evaluation pipeline's code); probabilities, top-k and class names
out; SavedModel and TFLite; each weight stored once."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from cvbench.inference import ModelInfo, save_model, serving
from cvbench.inference import export as export_lib
from cvbench.inference.export import export_for_serving
from cvbench.models import resnet18
from cvbench.utils.files import OUTPUTS_LIST

ROOT = Path(__file__).resolve().parents[2]  # the repository
# "stretch": a 32 x 32 image reaches the model unchanged, so the outputs compare with the
# Keras model's on the same pixels (the crop rules: test_raw_size_images_*)
INFO = ModelInfo(
    task="classification", class_names=tuple("abcde"), image_size=(32, 32), resize="stretch"
)
NAMES = np.array([name.encode() for name in "abcde"])


@pytest.fixture(scope="module")
def classifier():
    """ResNet-18 at 32 px, 5 logits, random weights with batch-norm statistics off (0, 1)
    and a predictions layer that tells random images apart: kernel stddev 0.03 (not 0.01:
    logits a few units apart) and a bias that centres the logits of a calibration batch
    (the pooled features of random images share a large common part that would otherwise
    pick one class for all)."""
    keras.utils.set_random_seed(0)
    model = resnet18(input_shape=(32, 32, 3), num_classes=5, classifier_activation=None)
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.normal(0, 0.3, n).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, n).astype("float32"))
    dense = model.get_layer("predictions")
    kernel = rng.normal(0, 0.03, dense.kernel.shape).astype("float32")
    features = keras.Model(model.input, model.get_layer("avg_pool").output)
    mean = np.asarray(features(images(16, seed=99).astype("float32"))).mean(0)
    dense.set_weights([kernel, -(mean @ kernel)])
    return model


def images(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)


def test_saved_model_signature(classifier, tmp_path):
    path = export_for_serving(classifier, tmp_path / "cls", info=INFO, top_k=3)
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    (spec,) = serve.structured_input_signature[1].values()
    assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, None, None, 3]
    x = images(6)
    out = {k: v.numpy() for k, v in serve(images=tf.constant(x)).items()}
    logits = np.asarray(classifier(x.astype("float32"), training=False), np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(out["probabilities"], probs, atol=1e-4)  # folded: 1e-4
    order = np.argsort(-probs, axis=-1, kind="stable")[:, :3]
    np.testing.assert_array_equal(out["top_k_indices"], order)
    np.testing.assert_allclose(out["top_k_scores"], np.take_along_axis(probs, order, -1), atol=1e-4)
    np.testing.assert_array_equal(out["top_k_class_names"], NAMES[order])  # the file's names
    assert len(set(order[:, 0])) > 1  # not one class for every image


def _pipeline_views(raw: np.ndarray, rule: str) -> np.ndarray:
    """What the evaluation pipeline feeds the model for these images, from its entry point:
    PNG bytes -> `preprocess_for_eval` (scaling x / 1 - 0, so pixels stay [0, 255])."""
    from cvbench.data import ImagePreprocessing
    from cvbench.data.read.preprocessing import preprocess_for_eval

    p = ImagePreprocessing(eval_crop=rule, crop_fraction=0.875, mean=(0.0,) * 3, std=(1.0,) * 3)
    return np.stack([
        preprocess_for_eval(tf.io.encode_png(image), image_size=32, preprocessing=p).numpy()
        for image in raw
    ])  # fmt: skip


@pytest.mark.parametrize("fmt", ["saved_model", "tflite"])
@pytest.mark.parametrize("rule", ["center_crop", "crop_then_resize"])
def test_raw_size_images_get_the_evaluation_pipelines_pixels(classifier, tmp_path, rule, fmt):
    info = ModelInfo(task="classification", class_names=tuple("abcde"), image_size=(32, 32),
                     resize=rule)  # fmt: skip
    raw = np.random.default_rng(7).integers(0, 256, (4, 45, 61, 3), dtype=np.uint8)
    views = _pipeline_views(raw, rule)
    # the two rules see other pixels of a 45 x 61 image: 37 x 50 then the central 32, or the
    # central 39 x 53 (int(45 * 0.125 / 2) = 2, int(61 * 0.125 / 2) = 3) resized to 32
    assert np.abs(views - _pipeline_views(raw, ({*RULES} - {rule}).pop())).max() > 10
    # the export's own step, as its graph runs it: the pipeline's pixels exactly
    to_input = tf.function(serving.model_input_function(info))
    np.testing.assert_array_equal(to_input(tf.constant(raw)).numpy(), views)
    expected = tf.nn.softmax(classifier(views, training=False)).numpy()
    out_path = tmp_path / ("cls.tflite" if fmt == "tflite" else "cls")
    path = export_for_serving(classifier, out_path, info=info, top_k=2, format=fmt, fold=False)
    if fmt == "tflite":
        out = tf.lite.Interpreter(model_path=str(path)).get_signature_runner()(images=raw)
    else:
        serve = tf.saved_model.load(str(path)).signatures["serving_default"]
        out = {k: v.numpy() for k, v in serve(images=tf.constant(raw)).items()}
    # not folded, the same pixels: float32 rounding of other convolution kernels only
    np.testing.assert_allclose(out["probabilities"], expected, atol=1e-5)
    order = np.argsort(-expected, axis=-1, kind="stable")[:, :2]
    np.testing.assert_array_equal(out["top_k_class_names"], NAMES[order])


RULES = ("center_crop", "crop_then_resize")


def test_each_weight_is_stored_once(classifier, tmp_path):
    # Keras' own `track` would store every variable twice (89.7 MB for ResNet-18's 44.8 MB)
    path = export_for_serving(classifier, tmp_path / "cls", info=INFO)
    weights = sum(int(np.prod(w.shape)) * 4 for w in classifier.weights)
    stored = sum(f.stat().st_size for f in (path / "variables").iterdir())
    # folded: the batch norms' 4 vectors per layer become one bias: a little less
    assert 0.9 * weights < stored < 1.05 * weights, (stored, weights)


@pytest.mark.parametrize("fmt", ["saved_model", "tflite"])
def test_the_export_carries_the_model_info(classifier, tmp_path, fmt):
    from cvbench.inference import read_export_info

    info = ModelInfo(task="classification", class_names=tuple("abcde"), image_size=(32, 32),
                     resize="crop_then_resize", crop_fraction=0.8, interpolation="bilinear_tf1",
                     quantize_uint8=True)  # fmt: skip
    out = tmp_path / ("cls.tflite" if fmt == "tflite" else "cls")
    path = export_for_serving(classifier, out, info=info, format=fmt, fold=False)
    assert read_export_info(path) == info
    if fmt == "tflite":  # the metadata entry leaves the flatbuffer runnable
        runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner()
        assert runner(images=images(1))["top_k_class_names"].shape == (1, 5)
    other = tmp_path / "other.tflite"
    other.write_bytes(b"not a flatbuffer")
    with pytest.raises(ValueError, match="other.tflite: not a TFLite file"):
        read_export_info(other)


def test_top_k_above_the_class_count_gives_every_class(classifier, tmp_path):
    path = export_for_serving(classifier, tmp_path / "cls", info=INFO, top_k=50)
    out = tf.saved_model.load(str(path)).signatures["serving_default"](
        images=tf.constant(images(2))
    )
    assert out["top_k_indices"].shape == (2, 5)
    assert sorted(out["top_k_indices"].numpy()[0]) == [0, 1, 2, 3, 4]


def test_a_softmax_model_is_not_softmaxed_twice(tmp_path):
    model = resnet18(input_shape=(32, 32, 3), num_classes=5)  # ends in softmax
    path = export_for_serving(model, tmp_path / "cls", info=INFO)
    x = images(2)
    out = tf.saved_model.load(str(path)).signatures["serving_default"](images=tf.constant(x))
    # A second softmax would flatten these (max about 0.4 over 5 classes); the export folds
    # the batch norms, hence 1e-4.
    np.testing.assert_allclose(out["probabilities"].numpy(), model(x.astype("float32")), atol=1e-4)


def test_tflite_top1_equals_keras(classifier, tmp_path):
    path = export_for_serving(classifier, tmp_path / "cls.tflite", info=INFO, format="tflite")
    assert path.is_file() and path.stat().st_size > 100_000  # ResNet-18's weights in it
    runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    x = images(8, seed=3)
    out = runner(images=x)
    keras_top1 = np.argmax(classifier(x.astype("float32"), training=False), -1)
    np.testing.assert_array_equal(out["top_k_indices"][:, 0], keras_top1)
    assert len(set(keras_top1)) > 1  # not one class for every image


def test_export_from_a_model_file_uses_its_info(classifier, tmp_path):
    model_file = save_model(classifier, tmp_path / "m.keras", INFO)
    path = export_for_serving(model_file, tmp_path / "cls", top_k=2)
    out = tf.saved_model.load(str(path)).signatures["serving_default"](
        images=tf.constant(images(1))
    )
    assert out["top_k_indices"].shape == (1, 2) and out["probabilities"].shape == (1, 5)


def test_written_atomically_with_the_umask(classifier, tmp_path):
    old = os.umask(0o027)
    try:
        path = export_for_serving(classifier, tmp_path / "cls.tflite", info=INFO, format="tflite")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "cls_tflite_info.json").stat().st_mode) == 0o640
    names = sorted(p.name for p in tmp_path.iterdir())
    # no staging left; the file and its info file are recorded
    assert names == [OUTPUTS_LIST, "cls.tflite", "cls_tflite_info.json"]
    with pytest.raises(FileExistsError, match="cls.tflite exists; pass overwrite=True"):
        export_for_serving(classifier, path, info=INFO, format="tflite")


def test_bad_arguments(classifier, tmp_path):
    with pytest.raises(ValueError, match="format must be one of .*got 'onnx'"):
        export_for_serving(classifier, tmp_path / "x", info=INFO, format="onnx")
    with pytest.raises(ValueError, match="needs the model's ModelInfo"):
        export_for_serving(classifier, tmp_path / "x")
    with pytest.raises(ValueError, match="top_k must be an int >= 1; got 0"):
        export_for_serving(classifier, tmp_path / "x", info=INFO, top_k=0)
    wrong = ModelInfo(task="classification", class_names=tuple("abcde"), image_size=(64, 64))
    with pytest.raises(ValueError, match=r"input size \(32, 32\) differs .* \(64, 64\)"):
        export_for_serving(classifier, tmp_path / "x", info=wrong)
    assert not (tmp_path / "x").exists()


def test_another_backend_is_refused(classifier, tmp_path, monkeypatch):
    monkeypatch.setattr(export_lib, "_backend", lambda: "jax")
    with pytest.raises(RuntimeError, match="export needs the TensorFlow backend"):
        export_for_serving(classifier, tmp_path / "x", info=INFO)


def test_under_jax_export_raises(tmp_path):
    code = (
        "import keras\n"
        "from cvbench.inference import ModelInfo\n"
        "from cvbench.inference.export import export_for_serving\n"
        "assert keras.config.backend() == 'jax'\n"
        "model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),"
        " keras.layers.Dense(5)])\n"
        "info = ModelInfo(task='classification', class_names=tuple('abcde'),"
        " image_size=(32, 32))\n"
        "try:\n"
        "    export_for_serving(model, 'out', info=info)\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == (
        "export needs the TensorFlow backend (KERAS_BACKEND=jax); the .keras file loads on "
        "TensorFlow: export it there"
    )
    assert not (tmp_path / "out").exists()
