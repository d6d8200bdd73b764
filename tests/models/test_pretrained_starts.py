"""Pretrained starts (#39 item 1): keras.applications weights in cvbench models see the input
they were trained on, through cvbench's own RGB input path.

keras.applications cannot download here: every weight file is a keras.applications model
with RANDOM weights saved locally (`weights=None`, then `save_weights`), so only the layout,
the stem's channel order and the input normalization are compared. The reference output is
keras.applications' own model on its own `preprocess_input` of the same RGB [0, 255] images.
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest

from cvbench.models import pretrained
from cvbench.models.inception_v3 import inception_v3
from cvbench.models.resnet import resnet50
from cvbench.tasks.base import TaskOptions
from cvbench.tasks.classification import ClassificationTask
from cvbench.tasks.recipes.resolve import resolve_recipe
from cvbench.zoo import get_model

RESNET_SIZE = 64
INCEPTION_SIZE = 75  # Inception V3's minimum

# A block output both models name alike, early enough that a random network's output
# still depends on its input's offset (the logits of a random Inception V3 barely do).
FEATURES = {"resnet50": "conv2_block3_out", "inception_v3": "mixed0"}

# (cvbench name, keras.applications class, its preprocess_input, size)
MODELS = {
    "resnet50": (
        keras.applications.ResNet50,
        keras.applications.resnet.preprocess_input,
        RESNET_SIZE,
    ),
    "inception_v3": (
        keras.applications.InceptionV3,
        keras.applications.inception_v3.preprocess_input,
        INCEPTION_SIZE,
    ),
}


def _random_applications_file(tmp_path, name: str, *, seed: int, include_top: bool = True):
    """keras.applications' model `name` with random weights (batch-norm statistics too, so
    the input's offset matters), saved as a Keras 3 `.weights.h5` file: (model, path)."""
    app, _, size = MODELS[name]
    keras.utils.set_random_seed(seed)
    kwargs = {"classifier_activation": None} if include_top else {}
    model = app(weights=None, include_top=include_top, input_shape=(size, size, 3), **kwargs)
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(rng.normal(0.0, 0.5, layer.moving_mean.shape))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, layer.moving_variance.shape))
    path = tmp_path / f"{name}{'' if include_top else '_notop'}.weights.h5"
    model.save_weights(path)
    return model, path


def _rgb_images(size: int) -> np.ndarray:
    """Two RGB [0, 255] images whose channels differ (a BGR/RGB mix-up shows), of integer
    pixels as decoded images are (the Inception V3 recipe's `quantize_uint8` keeps them)."""
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (2, size, size, 3)).astype("float32")
    images[..., 0] = np.clip(images[..., 0] + 60.0, 0, 255)  # red brighter than blue
    return images


def _reference(model: keras.Model, name: str, images: np.ndarray) -> np.ndarray:
    """keras.applications' model on its own preprocess_input (which takes RGB)."""
    _, preprocess, _ = MODELS[name]
    return keras.ops.convert_to_numpy(model(preprocess(images.copy()), training=False))


def _assert_float32_close(got: np.ndarray, expected: np.ndarray) -> None:
    scale = float(np.abs(expected).max())
    assert scale > 0.0
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-5 * scale)


def _normalize(images: np.ndarray, norm: pretrained.InputNormalization) -> np.ndarray:
    return (images - np.asarray(norm.mean, "float32")) / np.asarray(norm.std, "float32")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("applications")
    return {
        "resnet50": _random_applications_file(tmp, "resnet50", seed=1),
        "inception_v3": _random_applications_file(tmp, "inception_v3", seed=2),
    }


def test_the_normalizations_are_keras_applications_preprocess_input():
    images = _rgb_images(4)
    # caffe: RGB -> BGR, minus the BGR means [103.939, 116.779, 123.68]; in RGB order
    # (the stem permuted) that is RGB minus (123.68, 116.779, 103.939), std 1.
    caffe = keras.applications.resnet.preprocess_input(images.copy())
    np.testing.assert_allclose(
        _normalize(images, pretrained.CAFFE)[..., ::-1], caffe, rtol=0, atol=1e-4
    )
    # tf mode: x / 127.5 - 1 = (x - 127.5) / 127.5.
    tf_mode = keras.applications.inception_v3.preprocess_input(images.copy())
    np.testing.assert_allclose(_normalize(images, pretrained.INCEPTION), tf_mode, atol=1e-6)


@pytest.mark.parametrize("name", ["resnet50", "inception_v3"])
def test_get_model_from_a_keras_applications_file_equals_keras_applications(files, name):
    theirs, path = files[name]
    size = MODELS[name][2]
    images = _rgb_images(size)
    ours = get_model(name, weights=path, input_shape=(size, size, 3), classifier_activation=None)
    norm = pretrained.weights_normalization(name, path)
    got = keras.ops.convert_to_numpy(ours(_normalize(images, norm), training=False))
    _assert_float32_close(got, _reference(theirs, name, images))
    features, their_features = _features(ours, name), _features(theirs, name)
    expected = _reference(their_features, name, images)
    _assert_float32_close(
        keras.ops.convert_to_numpy(features(_normalize(images, norm), training=False)), expected
    )
    # The recipes' ImageNet mean/std is not what these weights were trained on: over 100
    # times the tolerance off (measured: ResNet-50 x 10^4, Inception V3 x 1700).
    imagenet = pretrained.InputNormalization(
        (123.68, 116.28, 103.53), (58.395, 57.12, 57.385), "mean_std"
    )
    wrong = keras.ops.convert_to_numpy(features(_normalize(images, imagenet), training=False))
    assert np.abs(wrong - expected).max() > 100 * 2e-5 * np.abs(expected).max()


def _features(model: keras.Model, name: str) -> keras.Model:
    return keras.Model(model.inputs, model.get_layer(FEATURES[name]).output)


def _task(name: str, path, *, num_classes: int | None = None) -> ClassificationTask:
    """The task `cvbench train --model NAME --weights PATH --image-size S` builds."""
    size = MODELS[name][2]
    recipe = resolve_recipe(
        name,
        settings={"weights": str(path), "image_size": size},
        reasons={"weights": "--weights", "image_size": "--image-size"},
    )
    return ClassificationTask(TaskOptions(model=name, recipe=recipe, num_classes=num_classes))


@pytest.mark.parametrize("name", ["resnet50", "inception_v3"])
def test_the_task_feeds_the_weights_normalization_through_its_pipeline(files, name):
    """Training and evaluation (the pipeline's `scale_input` of the task's preprocessing)
    and every model file (`user_model`, [0, 255] RGB in) give keras.applications' logits."""
    from cvbench.data.read.preprocessing import scale_input

    theirs, path = files[name]
    task = _task(name, path)
    images = _rgb_images(task.image_size)
    expected = _reference(theirs, name, images)
    model = task.build_model()
    fed = scale_input(images, task.preprocessing()).numpy()
    _assert_float32_close(keras.ops.convert_to_numpy(model(fed, training=False)), expected)
    user = task.user_model(model)
    _assert_float32_close(keras.ops.convert_to_numpy(user(images, training=False)), expected)
    # Features too, where a wrong normalization shows on random weights.
    _assert_float32_close(
        keras.ops.convert_to_numpy(_features(model, name)(fed, training=False)),
        _reference(_features(theirs, name), name, images),
    )
    # The run states why its normalization is not the recipe's reference (Inception V3's
    # nvcnn recipe already scales x / 127.5 - 1: nothing deviates).
    reasons = {d.knob: d.reason for d in task.recipe.deviations if "preprocessing" in d.knob}
    if name == "inception_v3":
        assert reasons == {}
    else:
        assert set(reasons) == {"preprocessing.mean", "preprocessing.std"}
        assert all(
            r == "--weights: keras.applications' weights were trained on caffe input "
            "normalization (RGB mean (123.68, 116.779, 103.939), std (1.0, 1.0, 1.0))"
            for r in reasons.values()
        )


def test_resnet50_task_states_the_v1_model_and_the_caffe_normalization(files):
    _, path = files["resnet50"]
    task = _task("resnet50", path)
    assert task.input_normalization() == ((123.68, 116.779, 103.939), (1.0, 1.0, 1.0))
    reason = task.recipe.deviation("model.weights").reason
    assert reason.startswith("--weights: keras.applications' ResNet v1 weights")
    assert "the recipe's is v1.5" in reason
    model = task.build_model()
    # v1: the stride of conv3_block1 is in its first 1x1 conv.
    assert model.get_layer("conv3_block1_1_conv").strides == (2, 2)
    assert model.get_layer("conv3_block1_2_conv").strides == (1, 1)


def test_inception_task_keeps_its_bn_scale_and_gets_gamma_one(files):
    """The Inception V3 recipe has batch-norm gamma (nvcnn), keras.applications' file has
    none: gamma starts at 1 (the same function), where the load used to fail on bn_scale."""
    _, path = files["inception_v3"]
    task = _task("inception_v3", path)
    assert task.recipe.model_knobs.bn_scale is True
    assert task.input_normalization() == ((127.5,) * 3, (127.5,) * 3)
    model = task.build_model()
    gamma = keras.ops.convert_to_numpy(model.get_layer("conv1_bn").gamma)
    np.testing.assert_array_equal(gamma, np.ones_like(gamma))


def test_other_weights_keep_the_recipe_normalization(tmp_path):
    # cvbench's own weight file: the recipe's mean/std, no deviation.
    path = tmp_path / "own.weights.h5"
    resnet50(num_classes=1000, input_shape=(64, 64, 3)).save_weights(path)
    assert pretrained.weights_normalization("resnet50", path) is None
    assert pretrained.weights_normalization("resnet50", None) is None
    task = _task("resnet50", path)
    assert task.input_normalization() == ((123.68, 116.28, 103.53), (58.395, 57.12, 57.385))
    assert task.recipe.deviation("preprocessing.mean") is None


def _new_head_lines(caught) -> list[str]:
    return [str(w.message) for w in caught if "a new head" in str(w.message)]


@pytest.mark.parametrize("name", ["resnet50", "inception_v3"])
def test_another_class_count_gets_a_new_head_stated_in_one_line(files, name):
    theirs, path = files[name]
    size = MODELS[name][2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = get_model(
            name,
            weights=path,
            num_classes=3,
            input_shape=(size, size, 3),
            classifier_activation=None,
        )
    assert _new_head_lines(caught) == [
        f"{ours.name}: the weights' classifier has 1000 classes, the model 3: a new head "
        "(the builder's dense_initializer), the backbone's weights loaded"
    ]
    assert ours.output_shape == (None, 3)
    # The backbone is the file's: the pooled features equal keras.applications'.
    images = _rgb_images(size)
    norm = pretrained.weights_normalization(name, path)
    features = keras.Model(ours.inputs, ours.get_layer("avg_pool").output)
    their_features = keras.Model(theirs.inputs, theirs.get_layer("avg_pool").output)
    _assert_float32_close(
        keras.ops.convert_to_numpy(features(_normalize(images, norm), training=False)),
        _reference(their_features, name, images),
    )


@pytest.mark.parametrize(
    ("name", "build"),
    [("resnet50", resnet50), ("inception_v3", inception_v3)],
)
def test_imagenet_with_three_classes_fetches_the_notop_file(monkeypatch, tmp_path, name, build):
    requested = []

    def get_file(fname, origin, **kwargs):
        requested.append(fname)
        raise RuntimeError("stop here")  # the file itself is not needed

    monkeypatch.setattr(keras.utils, "get_file", get_file)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ConnectionError):
            build(num_classes=3, input_shape=(MODELS[name][2],) * 2 + (3,), weights="imagenet")
    assert requested == [pretrained.PUBLISHED[(name, False)].fname]
    assert len(_new_head_lines(caught)) == 1


def test_offline_imagenet_is_one_line_naming_url_cache_and_weights_file(monkeypatch, tmp_path):
    key = ("resnet50", False)
    entry = pretrained.PUBLISHED[key]
    missing = (tmp_path / "nowhere" / entry.fname).as_uri()
    monkeypatch.setitem(
        pretrained.PUBLISHED, key, pretrained.PublishedFile(entry.fname, missing, entry.file_hash)
    )
    (tmp_path / "keras_home").mkdir()
    monkeypatch.setattr(pretrained, "CACHE_DIR", str(tmp_path / "keras_home"))
    with pytest.raises(ConnectionError) as info:
        resnet50(include_top=False, input_shape=(64, 64, 3), weights="imagenet")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"cannot download {missing} (")
    cache = tmp_path / "keras_home" / "models" / entry.fname
    assert f"offline, put that file in {cache}, or pass --weights FILE" in message
    # The CLI prints it as its one error line, exit 1 (an OSError at run time).
    from cvbench.cli.errors import known_error

    line, code = known_error(info.value, command="train")
    assert line == f"cvbench train: error: {message}" and code == 1


def test_cache_path_follows_keras_home(monkeypatch):
    monkeypatch.setattr(pretrained, "CACHE_DIR", None)
    monkeypatch.setenv("KERAS_HOME", "/data/keras")
    assert pretrained.cache_path("w.h5") == "/data/keras/models/w.h5"
    monkeypatch.delenv("KERAS_HOME")
    monkeypatch.setenv("HOME", "/home/u")
    assert pretrained.cache_path("w.h5") == "/home/u/.keras/models/w.h5"


def _train_args(name: str, path, log_dir=None) -> list[str]:
    size = str(MODELS[name][2])
    argv = ["train", "--model", name, "--synthetic", "--weights", str(path), "--image-size",
            size, "--batch-size", "2", "--precision", "fp32"]  # fmt: skip
    return argv + (["--log-dir", str(log_dir)] if log_dir is not None else [])


@pytest.mark.parametrize("name", ["resnet50", "inception_v3"])
def test_cvbench_train_weights_file_feeds_keras_applications_inputs(files, name):
    """`cvbench train --model NAME --weights FILE`: the task and Trainer its flags build
    (before any step) give keras.applications' logits on the pipeline's own input."""
    from cvbench.cli import build_parser
    from cvbench.cli.task_args import task_from_args
    from cvbench.data.read.preprocessing import scale_input
    from cvbench.tasks import build_trainer
    from cvbench.training import TrainConfig

    theirs, path = files[name]
    args = build_parser().parse_args(_train_args(name, path))
    task = task_from_args(args)
    trainer = build_trainer(task, precision="fp32", config=TrainConfig(progress_bar=False))
    images = _rgb_images(task.image_size)
    fed = scale_input(images, task.preprocessing()).numpy()
    got = keras.ops.convert_to_numpy(trainer.model(fed, training=False))
    _assert_float32_close(got, _reference(theirs, name, images))


@pytest.mark.heavy
def test_cvbench_train_weights_file_run_exports_the_weights_normalization(tmp_path, files):
    """A whole `cvbench train --weights FILE` run of ResNet-50: the exported model.keras
    (plain Keras, [0, 255] RGB in) puts the caffe normalization in front of the model, and
    the run log's recipe event records the normalization and the v1 model with their
    reasons."""
    import json

    from cvbench import cli

    _, path = files["resnet50"]
    log_dir = tmp_path / "run"
    argv = _train_args("resnet50", path, log_dir)
    argv += ["--epochs", "1", "--steps-per-epoch", "1", "--eval", "none", "--no-progress"]
    assert cli.main(argv) == 0
    exported = keras.saving.load_model(log_dir / "export" / "model.keras", compile=False)
    rescale = next(la for la in exported.layers if isinstance(la, keras.layers.Rescaling))
    # (x - mean) / std = x * (1 / std) + (-mean / std), std 1: offset = -mean.
    np.testing.assert_allclose(rescale.scale, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(rescale.offset, [-123.68, -116.779, -103.939], rtol=1e-6)
    events = [json.loads(line) for line in (log_dir / "train_log.jsonl").read_text().splitlines()]
    recipe = next(e for e in events if "deviations" in e)  # the run log's recipe event
    reasons = {d["knob"]: d["reason"] for d in recipe["deviations"]}
    assert "caffe input normalization" in reasons["preprocessing.mean"]
    assert "the model is built as ResNet v1" in reasons["model.weights"]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("resnet50", ((123.68, 116.779, 103.939), (1.0, 1.0, 1.0))),  # caffe: minus means
        ("inception_v3", ((127.5,) * 3, (127.5,) * 3)),  # x / 127.5 - 1
    ],
)
def test_the_model_contract_records_the_weights_normalization(files, name, expected):
    """`ModelInfo` (what every model file and its info file carry) states the normalization
    the model applies to its [0, 255] input: the weights', not the recipe's reference."""
    from cvbench.utils.model_file import ModelInfo

    _, path = files[name]
    info = _task(name, path).model_info()
    assert (info.input_mean, info.input_std) == expected
    assert ModelInfo.from_dict(info.to_dict()) == info  # the file's JSON keeps it
    if name == "resnet50":  # without those weights: the recipe's ImageNet mean/std
        recipe = resolve_recipe(name, settings={"image_size": RESNET_SIZE})
        own = ClassificationTask(TaskOptions(model=name, recipe=recipe)).model_info()
        assert (own.input_mean, own.input_std) == (
            (123.68, 116.28, 103.53),
            (58.395, 57.12, 57.385),
        )


def test_model_info_refuses_a_malformed_normalization():
    from cvbench.utils.model_file import ModelInfo

    base = {"task": "classification", "class_names": ("a",), "image_size": (8, 8)}
    assert ModelInfo(**base).input_mean is None  # older files: not recorded
    for bad in ({"input_mean": (1.0, 2.0)}, {"input_std": (1.0, 0.0, 1.0)},
                {"input_mean": (1.0, float("nan"), 2.0)}, {"input_std": "1"}):  # fmt: skip
        with pytest.raises(ValueError, match="input_(mean|std) must be"):
            ModelInfo(**base, **bad)
