"""The contract every registered model keeps, on every backend, at a tiny size.

Builds, output shape, no NaN, a non-zero gradient for every trainable variable, `get_config`
round trip and `.keras` round trip. Each model is built once per module (building dominates
the cost) and reused by the tests that only read it.
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from cvbench.zoo import get_model, list_models

agnostic = pytest.mark.backend_agnostic

NUM_CLASSES = 10
BATCH = 2
# Tiny builds: 64x64 inputs and 10 classes, unless a model needs other arguments.
TINY_DEFAULT = {"num_classes": NUM_CLASSES, "input_shape": (64, 64, 3)}
TINY_KWARGS = {
    "inception_v3": {"num_classes": NUM_CLASSES, "input_shape": (75, 75, 3)},  # its minimum
    # Registered by the detection package; takes a square image size and a backbone name.
    "ssd320": {"num_classes": 3, "image_size": 128, "backbone": "resnet18"},
}
CLASSIFIERS = ("inception_v3", "resnet101", "resnet152", "resnet18", "resnet34", "resnet50")
# Trainable parameters at 1000 classes (torchvision's counts for ResNets, keras.applications'
# for Inception V3), and the classifier's input width C: predictions has (C + 1) * classes.
TRAINABLE_AT_1000 = {
    "resnet18": (11_689_512, 512),
    "resnet34": (21_797_672, 512),
    "resnet50": (25_557_032, 2048),
    "resnet101": (44_549_160, 2048),
    "resnet152": (60_192_808, 2048),
    "inception_v3": (23_817_352, 2048),
}


# The whole registry runs on both backends, except SSD320, whose JAX run (model, gradients,
# saving) is in tests/detection/test_ssd.py.
TENSORFLOW_ONLY = ("ssd320",)
REGISTRY = [
    pytest.param(name, marks=() if name in TENSORFLOW_ONLY else agnostic) for name in list_models()
]


def _images(model: keras.Model, seed: int = 0) -> np.ndarray:
    _, height, width, channels = model.input_shape
    shape = (BATCH, height, width, channels)
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.fixture(scope="module")
def tiny():
    """`tiny(name)`: the registered model at its tiny size with 10 classes, built once."""
    cache: dict[str, keras.Model] = {}

    def get(name: str) -> keras.Model:
        if name not in cache:
            cache[name] = get_model(name, **TINY_KWARGS.get(name, TINY_DEFAULT))
        return cache[name]

    yield get
    cache.clear()


def _numpy_outputs(model: keras.Model, x: np.ndarray) -> list[np.ndarray]:
    return [keras.ops.convert_to_numpy(o) for o in keras.tree.flatten(model(x, training=False))]


@agnostic
def test_registry_has_the_classifiers():
    assert set(CLASSIFIERS) <= set(list_models())


@pytest.mark.parametrize("name", REGISTRY)
def test_builds_and_outputs_have_the_declared_shape(tiny, name):
    model = tiny(name)
    outputs = _numpy_outputs(model, _images(model))
    declared = [o.shape for o in model.outputs]
    for out, shape in zip(outputs, declared, strict=True):
        assert out.shape == (BATCH, *shape[1:])
        assert np.isfinite(out).all()
    if name in CLASSIFIERS:
        (probs,) = outputs
        assert probs.shape == (BATCH, NUM_CLASSES)
        assert probs.dtype == np.float32
        # Default classifier_activation="softmax": rows are distributions.
        np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("name", REGISTRY)
def test_every_trainable_variable_gets_a_finite_nonzero_gradient(tiny, gradients, name):
    model = tiny(name)
    rng = np.random.default_rng(1)
    weights = [
        rng.normal(size=(BATCH, *o.shape[1:])).astype("float32")
        for o in keras.tree.flatten(model.outputs)
    ]
    loss, grads = gradients(model, _images(model), weights)
    assert np.isfinite(loss)
    variables = model.trainable_variables
    assert len(grads) == len(variables) > 0
    for variable, grad in zip(variables, grads, strict=True):
        assert grad is not None, variable.path
        assert np.isfinite(grad).all(), variable.path
        assert np.abs(grad).max() > 0.0, variable.path


@pytest.mark.parametrize("name", [n for n in REGISTRY if n.values[0] in TRAINABLE_AT_1000])
def test_trainable_parameter_count(tiny, name):
    # 10 classes instead of 1000 removes 990 * (C + 1) classifier parameters.
    at_1000, width = TRAINABLE_AT_1000[name]
    model = tiny(name)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert trainable == at_1000 - (1000 - NUM_CLASSES) * (width + 1)


@pytest.mark.parametrize("name", REGISTRY)
def test_get_config_and_keras_file_round_trip(tiny, name, tmp_path):
    # load_model rebuilds the model from the get_config stored in the file (from_config),
    # then loads the weights: one rebuild checks both round trips.
    model = tiny(name)
    x = _images(model, seed=2)
    expected = _numpy_outputs(model, x)
    path = tmp_path / f"{name}.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert restored is not model
    # The file stores JSON: compare as JSON (tuples come back as lists).
    assert json.dumps(restored.get_config()) == json.dumps(model.get_config())
    for got, want in zip(_numpy_outputs(restored, x), expected, strict=True):
        np.testing.assert_array_equal(got, want)
