"""Loading keras.applications legacy `.h5` files and cvbench `.weights.h5` files.

The keras.applications models are built with random weights (no download) and written in the
legacy layout of the files keras.applications downloads; the cvbench model loaded from such a
file must compute the same function.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.models.weights import is_legacy_h5, read_legacy_h5
from cvbench.zoo import get_model

# The loader is numpy + h5py + Variable.assign: the ResNet-18 tests also run under JAX; the
# keras.applications comparisons, which build several full-size models (each an XLA compile
# per new shape under JAX), run under TensorFlow only.
agnostic = pytest.mark.backend_agnostic

SIZE = 96  # small input for the forward comparisons (>= 75 for Inception V3)


def _assert_same_function(
    ours: keras.Model, theirs: keras.Model, size: int = SIZE, *, bgr: bool = False
) -> None:
    """`ours` on x equals `theirs` on x; with `bgr` (keras.applications' ResNet-50 weights:
    ours takes RGB, its stem permuted, `resnet.rgb_stem`) theirs on x's channels reversed."""
    x = np.random.default_rng(1).uniform(-1.0, 1.0, (2, size, size, 3)).astype("float32")
    expected = keras.ops.convert_to_numpy(theirs(x[..., ::-1] if bgr else x, training=False))
    got = keras.ops.convert_to_numpy(ours(x, training=False))
    assert got.shape == expected.shape
    assert np.isfinite(expected).all()
    # Same graph, same weights: differences are float32 rounding only (conv algorithms, and
    # the bias folded into the moving mean), far below the outputs' scale.
    scale = float(np.abs(expected).max())
    assert scale > 0.0
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)


def _notop(model: keras.Model, last: str) -> keras.Model:
    """The keras.applications "notop" model: the same layers up to `last`."""
    return keras.Model(model.input, model.get_layer(last).output)


@pytest.fixture(scope="module")
def resnet50_files(tmp_path_factory, legacy_h5):
    """keras.applications ResNet50 (logits), randomised, saved with and without the top."""
    tmp = tmp_path_factory.mktemp("ka_resnet50")
    top = keras.applications.ResNet50(
        weights=None, input_shape=(SIZE, SIZE, 3), classifier_activation=None
    )
    top_path = legacy_h5(top, tmp / "resnet50_weights_tf_dim_ordering_tf_kernels.h5", seed=1)
    notop = _notop(top, "conv5_block3_out")
    notop_path = tmp / "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"
    legacy_h5(notop, notop_path, seed=None)
    return {"top": (top, top_path), "notop": (notop, notop_path)}


@pytest.fixture(scope="module")
def inception_files(tmp_path_factory, legacy_h5):
    tmp = tmp_path_factory.mktemp("ka_inception_v3")
    top = keras.applications.InceptionV3(
        weights=None, input_shape=(SIZE, SIZE, 3), classifier_activation=None
    )
    top_path = legacy_h5(top, tmp / "inception_v3_weights_tf_dim_ordering_tf_kernels.h5", seed=3)
    notop = _notop(top, "mixed10")
    notop_path = tmp / "inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5"
    legacy_h5(notop, notop_path, seed=None)
    return {"top": (top, top_path), "notop": (notop, notop_path)}


def test_fixture_file_is_what_keras_loads_as_legacy_h5(resnet50_files):
    # Keras itself (what keras.applications calls on its downloads) reads the fixture's file.
    model, path = resnet50_files["top"]
    assert is_legacy_h5(path)
    saved = [keras.ops.convert_to_numpy(v) for v in model.weights]
    try:
        for v in model.weights:
            v.assign(keras.ops.zeros(v.shape))
        model.load_weights(path)
        for a, v in zip(saved, model.weights, strict=True):
            np.testing.assert_array_equal(a, keras.ops.convert_to_numpy(v))
    finally:
        for a, v in zip(saved, model.weights, strict=True):
            v.assign(a)


def test_read_legacy_h5_lists_layers_with_weights_in_order(resnet50_files):
    _, path = resnet50_files["top"]
    layers = read_legacy_h5(path)
    assert layers[0].name == "conv1_conv"
    assert layers[0].weight_names == ("kernel", "bias")
    assert layers[0].values[0].shape == (7, 7, 3, 64)
    assert layers[1].weight_names == ("gamma", "beta", "moving_mean", "moving_variance")
    assert layers[-1].name == "predictions"
    assert layers[-1].values[0].shape == (2048, 1000)
    # 53 convs + 53 batch norms + predictions (ResNet-50: 1 + 16 blocks x 3 + 4 shortcuts).
    assert len(layers) == 2 * (1 + 16 * 3 + 4) + 1


@pytest.mark.parametrize("conv_bias", [False, True])
def test_resnet50_v1_matches_keras_applications_with_top(resnet50_files, conv_bias):
    theirs, path = resnet50_files["top"]
    ours = get_model(
        "resnet50",
        variant="v1",
        conv_bias=conv_bias,
        input_shape=(SIZE, SIZE, 3),
        weights=path,
        classifier_activation=None,
    )
    _assert_same_function(ours, theirs, bgr=True)


def test_resnet50_v1_matches_keras_applications_notop(resnet50_files):
    # The SSD backbone: no top, no conv bias, keras.applications' notop file.
    theirs, path = resnet50_files["notop"]
    ours = get_model(
        "resnet50", variant="v1", include_top=False, input_shape=(SIZE, SIZE, 3), weights=path
    )
    # Bias folded into the moving mean: m' = m - b.
    ka_conv, ka_bn = theirs.get_layer("conv1_conv"), theirs.get_layer("conv1_bn")
    expected = keras.ops.convert_to_numpy(ka_bn.moving_mean) - keras.ops.convert_to_numpy(
        ka_conv.bias
    )
    got = keras.ops.convert_to_numpy(ours.get_layer("conv1_bn").moving_mean)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    _assert_same_function(ours, theirs, bgr=True)


@pytest.mark.parametrize("kind", ["top", "notop"])
def test_inception_v3_matches_keras_applications(inception_files, kind):
    theirs, path = inception_files[kind]
    ours = get_model(
        "inception_v3",
        include_top=kind == "top",
        input_shape=(SIZE, SIZE, 3),
        weights=path,
        classifier_activation=None,
    )
    _assert_same_function(ours, theirs)


def test_v15_model_with_v1_weights_warns_and_differs(resnet50_files):
    # The negative control for the equality tests: the same weights with the stride in the
    # 3x3 instead of the 1x1 conv compute another function.
    theirs, path = resnet50_files["notop"]
    with pytest.warns(UserWarning, match="variant='v1'"):
        ours = get_model(
            "resnet50",
            variant="v1.5",
            include_top=False,
            input_shape=(SIZE, SIZE, 3),
            weights=path,
        )
    with pytest.raises(AssertionError):
        _assert_same_function(ours, theirs, bgr=True)


def test_resnet50_with_keras_applications_weights_is_v1_by_default(resnet50_files):
    # variant=None: the weights' own ResNet v1, no warning.
    theirs, path = resnet50_files["notop"]
    ours = get_model("resnet50", include_top=False, input_shape=(SIZE, SIZE, 3), weights=path)
    assert ours.get_layer("conv3_block1_1_conv").strides == (2, 2)
    _assert_same_function(ours, theirs, bgr=True)
    assert get_model("resnet50", input_shape=(64, 64, 3)).get_layer(
        "conv3_block1_2_conv"
    ).strides == (2, 2)  # no weights: v1.5


@pytest.fixture
def resnet18_legacy(tmp_path, legacy_h5):
    model = get_model("resnet18", num_classes=10, input_shape=(64, 64, 3))
    return model, legacy_h5(model, tmp_path / "resnet18.h5", seed=5)


@agnostic
def test_top_file_into_model_without_top_skips_the_classifier(resnet18_legacy):
    theirs, path = resnet18_legacy
    ours = get_model("resnet18", include_top=False, input_shape=(64, 64, 3), weights=path)
    _assert_same_function(ours, _notop(theirs, "conv5_block2_out"), size=64)


@agnostic
def test_notop_file_into_model_with_new_head_loads_the_backbone(tmp_path, legacy_h5):
    # Fine-tuning: a pretrained backbone ("notop" file), a fresh 10-class classifier.
    theirs = _notop(get_model("resnet18", input_shape=(64, 64, 3)), "conv5_block2_out")
    path = legacy_h5(theirs, tmp_path / "resnet18_notop.h5", seed=6)
    ours = get_model("resnet18", num_classes=10, input_shape=(64, 64, 3), weights=path)
    _assert_same_function(_notop(ours, "conv5_block2_out"), theirs, size=64)


@agnostic
def test_file_of_another_depth_raises_naming_missing_layers(resnet18_legacy):
    _, path = resnet18_legacy
    with pytest.raises(ValueError, match=r"missing from the file: \['conv2_block3_1_conv'"):
        get_model("resnet34", num_classes=10, input_shape=(64, 64, 3), weights=path)


@agnostic
def test_other_class_count_gets_a_new_head_and_the_files_backbone(resnet18_legacy):
    # keras-hub / torchvision fine-tuning: the file's 10-class classifier, a 5-class model.
    theirs, path = resnet18_legacy
    keras.utils.set_random_seed(3)
    head = get_model("resnet18", num_classes=5, input_shape=(64, 64, 3))
    initial = keras.ops.convert_to_numpy(head.get_layer("predictions").kernel)
    keras.utils.set_random_seed(3)  # the same initial head
    with pytest.warns(UserWarning) as caught:
        ours = get_model("resnet18", num_classes=5, input_shape=(64, 64, 3), weights=path)
    lines = [str(w.message) for w in caught if "new head" in str(w.message)]
    assert lines == [
        "resnet18: the weights' classifier has 10 classes, the model 5: a new head (the "
        "builder's dense_initializer), the backbone's weights loaded"
    ]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(ours.get_layer("predictions").kernel), initial
    )
    _assert_same_function(
        _notop(ours, "conv5_block2_out"), _notop(theirs, "conv5_block2_out"), size=64
    )


@agnostic
def test_own_weights_h5_round_trip(tmp_path):
    model = get_model("resnet18", num_classes=10, input_shape=(64, 64, 3))
    path = tmp_path / "r18.weights.h5"
    model.save_weights(path)
    assert not is_legacy_h5(path)
    keras.utils.set_random_seed(7)  # the new model's initial weights differ
    loaded = get_model("resnet18", num_classes=10, input_shape=(64, 64, 3), weights=path)
    x = np.random.default_rng(0).normal(size=(2, 64, 64, 3)).astype("float32")
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(model(x))
    )
    with pytest.raises(ValueError, match=r"r18\.weights\.h5"):
        get_model("resnet18", num_classes=5, input_shape=(64, 64, 3), weights=path)


@agnostic
def test_missing_or_unknown_weight_file_raises(tmp_path):
    with pytest.raises(ValueError, match="not found: .*nope.h5"):
        get_model("resnet18", input_shape=(64, 64, 3), weights=tmp_path / "nope.h5")
    bogus = tmp_path / "bogus.bin"
    bogus.write_bytes(b"not weights")
    with pytest.raises(ValueError, match="bogus.bin"):
        get_model("resnet18", input_shape=(64, 64, 3), weights=bogus)


@agnostic
def test_pre_2019_keras_resnet50_file_is_refused(tmp_path):
    import h5py

    path = tmp_path / "old_resnet50.h5"
    with h5py.File(path, "w") as f:  # the old layout's first two layers with weights
        f.attrs["layer_names"] = [b"conv1", b"res2a_branch2a"]
        for name, shape in (("conv1", (7, 7, 3, 64)), ("res2a_branch2a", (1, 1, 64, 64))):
            group = f.create_group(name)
            group.attrs["weight_names"] = [f"{name}/kernel:0".encode()]
            group.create_dataset(f"{name}/kernel:0", data=np.zeros(shape, "float32"))
    with pytest.raises(ValueError, match="pre-2019 keras.applications ResNet50"):
        get_model("resnet18", input_shape=(64, 64, 3), weights=path)
