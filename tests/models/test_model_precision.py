"""Mixed precision: float32 variables and a float32 classifier under mixed policies."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.zoo import get_model

agnostic = pytest.mark.backend_agnostic


@pytest.mark.parametrize(
    ("policy", "compute", "name", "size"),
    [
        pytest.param("mixed_bfloat16", "bfloat16", "resnet18", 64, marks=agnostic),
        # TensorFlow only: under JAX an Inception V3 build is dominated by compiles.
        ("mixed_bfloat16", "bfloat16", "inception_v3", 75),
        # float16 convolutions are ~100x slower on CPU: the smallest ResNet input, 1 image.
        pytest.param("mixed_float16", "float16", "resnet18", 32, marks=agnostic),
    ],
)
def test_variables_and_classifier_stay_float32(policy, compute, name, size):
    keras.config.set_dtype_policy(policy)  # conftest restores float32 after the test
    model = get_model(name, num_classes=10, input_shape=(size, size, 3), classifier_activation=None)
    assert {v.dtype for v in model.weights} == {"float32"}
    conv = next(layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D))
    assert conv.compute_dtype == compute  # the backbone really runs in low precision
    assert model.get_layer("predictions").compute_dtype == "float32"

    x = np.random.default_rng(0).normal(size=(1, size, size, 3)).astype("float32")
    logits = model(x, training=False)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert np.isfinite(keras.ops.convert_to_numpy(logits)).all()
