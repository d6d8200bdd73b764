"""Inception V3 specifics: parameter count, feature-map sizes, the minimum input size."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.zoo import get_model

agnostic = pytest.mark.backend_agnostic


# Structure only, a full-size build: TensorFlow only.
def test_parameter_count_at_1000_classes():
    model = get_model("inception_v3")  # 299x299, 1000 classes
    # keras.applications InceptionV3 (no auxiliary head): 23,851,784 parameters, of which
    # 34,432 non-trainable = batch-norm moving mean + variance over 17,216 channels (its
    # batch norms have no scale, so the trainable BN part is the 17,216 betas).
    assert model.count_params() == 23_851_784
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert trainable == 23_851_784 - 2 * 17_216 == 23_817_352
    assert not any(layer.name.startswith("aux") for layer in model.layers)


# Structure only (symbolic shapes): TensorFlow only, building Inception V3 under JAX compiles
# an initializer per kernel shape; the contract tests run it under JAX.
def test_feature_map_sizes():
    model = get_model("inception_v3", include_top=False, input_shape=(None, None, 3))
    # 299 -> conv1 (3x3/2 valid) 149 -> conv2 147 -> conv3 147 -> pool1 73 -> conv4 73
    # -> conv5 71 -> pool2 35 (mixed0-2) -> mixed3 17 (mixed4-7) -> mixed8 8 (mixed9-10).
    assert model.compute_output_shape((1, 299, 299, 3)) == (1, 8, 8, 2048)
    mixed7 = keras.Model(model.input, model.get_layer("mixed7").output)
    assert mixed7.compute_output_shape((1, 299, 299, 3)) == (1, 17, 17, 768)
    # 75 is the smallest input: 75 -> 37 -> 35 -> 35 -> 17 -> 17 -> 15 -> 7 -> 3 -> 1.
    assert model.compute_output_shape((1, 75, 75, 3)) == (1, 1, 1, 2048)


@agnostic
@pytest.mark.parametrize(
    ("shape", "message"),
    [((74, 299, 3), r"at least 75x75; got input_shape=\(74, 299, 3\)"), ((299, 299, 4), "4")],
)
def test_bad_input_shape_raises_naming_the_value(shape, message):
    with pytest.raises(ValueError, match=message):
        get_model("inception_v3", input_shape=shape)
