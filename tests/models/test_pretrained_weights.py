"""`weights="imagenet"` (keras.applications' files via keras.utils.get_file) and Keras 3
`.weights.h5` files of keras.applications models.

Nothing downloads: the published entries are pointed at files written here (`file://` URLs
with their own MD5) and the cache at a temporary Keras home; the real URLs and hashes are
checked against the installed Keras' own source.
"""

from __future__ import annotations

import hashlib
import inspect

import keras
import numpy as np
import pytest

from cvbench.detection.backbone import build_backbone
from cvbench.models import pretrained
from cvbench.models.inception_v3 import inception_v3
from cvbench.models.resnet import resnet18, resnet50
from cvbench.models.weights import is_keras_applications_file

SIZE = 64  # ResNet-50 forward comparisons
INCEPTION_SIZE = 75  # Inception V3's minimum


def _same_function(ours: keras.Model, theirs: keras.Model, size: int, *, bgr: bool) -> None:
    """`ours` on x equals `theirs` on x, or with `bgr` (keras.applications' ResNets: ours
    takes RGB, its stem permuted, `resnet.rgb_stem`) on x with its channels reversed."""
    x = np.random.default_rng(2).uniform(-1.0, 1.0, (2, size, size, 3)).astype("float32")
    x_theirs = x[..., ::-1] if bgr else x
    expected = keras.ops.convert_to_numpy(theirs(x_theirs, training=False))
    got = keras.ops.convert_to_numpy(ours(x, training=False))
    scale = float(np.abs(expected).max())
    assert scale > 0.0
    # Same weights, same graph: float32 rounding (and the conv bias folded into the BN mean).
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)


def _keras_home(monkeypatch, tmp_path) -> None:
    """Points the cache at tmp_path/keras_home (made: get_file falls back to /tmp/.keras
    for a directory it cannot write to)."""
    (tmp_path / "keras_home").mkdir(exist_ok=True)
    monkeypatch.setattr(pretrained, "CACHE_DIR", str(tmp_path / "keras_home"))


def _publish(monkeypatch, tmp_path, key, path) -> None:
    """Points PUBLISHED[key] at `path` (file:// URL, its MD5) and the cache at tmp_path."""
    md5 = hashlib.md5(path.read_bytes()).hexdigest()
    entry = pretrained.PUBLISHED[key]
    monkeypatch.setitem(
        pretrained.PUBLISHED, key, pretrained.PublishedFile(entry.fname, path.as_uri(), md5)
    )
    _keras_home(monkeypatch, tmp_path)


@pytest.fixture(scope="module")
def resnet50_notop(tmp_path_factory, legacy_h5):
    """keras.applications ResNet50 notop, randomised, as its published legacy file."""
    tmp = tmp_path_factory.mktemp("published")
    model = keras.applications.ResNet50(
        weights=None, include_top=False, input_shape=(SIZE, SIZE, 3)
    )
    fname = pretrained.PUBLISHED[("resnet50", False)].fname
    return model, legacy_h5(model, tmp / fname, seed=11)


def test_published_urls_and_hashes_are_keras_applications_own():
    from keras.src.applications import inception_v3 as ka_inception
    from keras.src.applications import resnet as ka_resnet

    for depth in (50, 101, 152):
        for include_top, index in ((True, 0), (False, 1)):
            entry = pretrained.PUBLISHED[(f"resnet{depth}", include_top)]
            assert entry.origin == ka_resnet.BASE_WEIGHTS_PATH + entry.fname
            assert entry.file_hash == ka_resnet.WEIGHTS_HASHES[f"resnet{depth}"][index]
    top, notop = (pretrained.PUBLISHED[("inception_v3", t)] for t in (True, False))
    assert (top.origin, notop.origin) == (
        ka_inception.WEIGHTS_PATH,
        ka_inception.WEIGHTS_PATH_NO_TOP,
    )
    source = inspect.getsource(ka_inception)  # the hashes are literals of its get_file calls
    assert f'file_hash="{top.file_hash}"' in source
    assert f'file_hash="{notop.file_hash}"' in source
    assert pretrained.imagenet_models() == ["inception_v3", "resnet101", "resnet152", "resnet50"]


def test_resnet50_imagenet_fetches_into_the_keras_cache_and_reuses_it(
    monkeypatch, tmp_path, resnet50_notop
):
    theirs, source = resnet50_notop
    _publish(monkeypatch, tmp_path, ("resnet50", False), source)
    kwargs = {"variant": "v1", "include_top": False, "input_shape": (SIZE, SIZE, 3)}
    ours = resnet50(weights="imagenet", **kwargs)
    cached = tmp_path / "keras_home" / "models" / source.name  # cache_subdir="models"
    assert cached.read_bytes() == source.read_bytes()
    _same_function(ours, theirs, SIZE, bgr=True)
    # The second build reads the cache: the origin is gone.
    monkeypatch.setitem(
        pretrained.PUBLISHED,
        ("resnet50", False),
        pretrained.PublishedFile(
            source.name,
            (tmp_path / "gone.h5").as_uri(),
            pretrained.PUBLISHED[("resnet50", False)].file_hash,
        ),
    )
    _same_function(resnet50(weights="imagenet", **kwargs), theirs, SIZE, bgr=True)


def test_a_file_with_another_hash_is_refused(monkeypatch, tmp_path, resnet50_notop):
    _, source = resnet50_notop
    monkeypatch.setitem(
        pretrained.PUBLISHED,
        ("resnet50", False),
        pretrained.PublishedFile(source.name, source.as_uri(), "0" * 32),
    )
    _keras_home(monkeypatch, tmp_path)
    with pytest.raises(ValueError, match="hash does not match"):
        resnet50(variant="v1", include_top=False, input_shape=(SIZE, SIZE, 3), weights="imagenet")


def test_ssd_backbone_imagenet_is_the_notop_file_with_an_rgb_stem(
    monkeypatch, tmp_path, resnet50_notop
):
    theirs, source = resnet50_notop
    _publish(monkeypatch, tmp_path, ("resnet50", False), source)
    backbone = build_backbone("resnet50_v1", (SIZE, SIZE), weights="imagenet")
    # keras.applications' kernels take BGR; the backbone takes RGB: input channels reversed.
    expected = keras.ops.convert_to_numpy(theirs.get_layer("conv1_conv").kernel)[:, :, ::-1, :]
    got = keras.ops.convert_to_numpy(backbone.get_layer("conv1_conv").kernel)
    np.testing.assert_array_equal(got, expected)
    c5 = keras.ops.convert_to_numpy(backbone.get_layer("conv5_block3_3_conv").kernel)
    want = keras.ops.convert_to_numpy(theirs.get_layer("conv5_block3_3_conv").kernel)
    np.testing.assert_array_equal(c5, want)


def test_inception_v3_imagenet_with_top(monkeypatch, tmp_path, legacy_h5):
    theirs = keras.applications.InceptionV3(
        weights=None, input_shape=(INCEPTION_SIZE, INCEPTION_SIZE, 3), classifier_activation=None
    )
    fname = pretrained.PUBLISHED[("inception_v3", True)].fname
    source = legacy_h5(theirs, tmp_path / fname, seed=13)
    _publish(monkeypatch, tmp_path, ("inception_v3", True), source)
    ours = inception_v3(
        input_shape=(INCEPTION_SIZE, INCEPTION_SIZE, 3),
        weights="imagenet",
        classifier_activation=None,
    )
    assert (tmp_path / "keras_home" / "models" / fname).is_file()
    _same_function(ours, theirs, INCEPTION_SIZE, bgr=False)


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: resnet18(weights="imagenet"),
            r"publishes ImageNet weights for \['inception_v3', 'resnet101', 'resnet152', "
            r"'resnet50'\] only, not 'resnet18'",
        ),
        (
            lambda: resnet50(variant="v1.5", weights="imagenet"),
            r"variant='v1' \(got variant='v1.5'\)",
        ),
        (lambda: build_backbone("resnet18", (64, 64), weights="imagenet"), "not 'resnet18'"),
        (
            lambda: resnet50(variant="v1", bn_scale=False, weights="imagenet"),
            r"resnet50 batch norms have gamma; build it with bn_scale=True",
        ),
    ],
)
def test_imagenet_where_nothing_is_published_raises_before_fetching(
    monkeypatch, tmp_path, build, message
):
    _keras_home(monkeypatch, tmp_path)
    with pytest.raises(ValueError, match=message):
        build()
    assert not (tmp_path / "keras_home" / "models").exists()  # nothing was fetched


def test_keras3_weights_file_of_keras_applications_resnet50(tmp_path, legacy_h5):
    theirs = keras.applications.ResNet50(
        weights=None, include_top=False, input_shape=(SIZE, SIZE, 3)
    )
    legacy_h5(theirs, tmp_path / "randomised.h5", seed=14)  # randomises theirs
    path = tmp_path / "resnet50_notop.weights.h5"
    theirs.save_weights(path)
    assert is_keras_applications_file(path)
    ours = resnet50(variant="v1", include_top=False, input_shape=(SIZE, SIZE, 3), weights=path)
    _same_function(ours, theirs, SIZE, bgr=True)
    # keras.applications weights are BGR: the SSD backbone flips the stem for this file too.
    backbone = build_backbone("resnet50_v1", (SIZE, SIZE), weights=path)
    expected = keras.ops.convert_to_numpy(theirs.get_layer("conv1_conv").kernel)[:, :, ::-1, :]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(backbone.get_layer("conv1_conv").kernel), expected
    )


def test_keras3_weights_file_of_keras_applications_inception_v3_with_top(tmp_path, legacy_h5):
    theirs = keras.applications.InceptionV3(
        weights=None,
        input_shape=(INCEPTION_SIZE, INCEPTION_SIZE, 3),
        classes=5,
        classifier_activation=None,
    )
    legacy_h5(theirs, tmp_path / "randomised.h5", seed=15)
    path = tmp_path / "inception_v3.weights.h5"
    theirs.save_weights(path)
    ours = inception_v3(
        num_classes=5,
        input_shape=(INCEPTION_SIZE, INCEPTION_SIZE, 3),
        weights=path,
        classifier_activation=None,
    )
    _same_function(ours, theirs, INCEPTION_SIZE, bgr=False)


def test_cvbench_own_weights_file_is_not_taken_for_keras_applications(tmp_path):
    # Our own files are loaded by Keras as they are and keep their stem (no BGR flip).
    path = tmp_path / "r18.weights.h5"
    resnet18(num_classes=3, input_shape=(32, 32, 3)).save_weights(path)
    assert not is_keras_applications_file(path)


def test_ssd320_backbone_weights_imagenet(monkeypatch, tmp_path, resnet50_notop):
    from cvbench.detection.ssd import ssd320

    theirs, source = resnet50_notop
    _publish(monkeypatch, tmp_path, ("resnet50", False), source)
    model = ssd320(num_classes=3, image_size=SIZE, backbone_weights="imagenet")
    backbone = model.get_layer("resnet50_backbone")
    expected = keras.ops.convert_to_numpy(theirs.get_layer("conv1_conv").kernel)[:, :, ::-1, :]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(backbone.get_layer("conv1_conv").kernel), expected
    )
    # The conv bias of keras.applications' file is folded into the frozen BN's moving mean.
    mean = keras.ops.convert_to_numpy(theirs.get_layer("conv4_block2_1_bn").moving_mean)
    bias = keras.ops.convert_to_numpy(theirs.get_layer("conv4_block2_1_conv").bias)
    got = keras.ops.convert_to_numpy(backbone.get_layer("conv4_block2_1_bn").moving_mean)
    np.testing.assert_allclose(got, mean - bias, rtol=1e-6, atol=1e-7)
