"""The SSD320 builder on tiny inputs (ResNet-18, 120-128 px, 3 classes): wiring, anchor
count at a size that is not a multiple of 128, saving, loading backbone weights, training."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.detection import SSDBoxLoss, SSDClassLoss, SSDLoss, encode_targets, ssd320
from cvbench.detection.anchors import multiscale_anchors
from cvbench.detection.batchnorm import FreezableBatchNormalization
from cvbench.detection.ssd import CHANNEL_MEANS
from cvbench.utils.model_layers import all_layers
from cvbench.zoo import get_model


def _np(x):
    return keras.ops.convert_to_numpy(x)


SIZE = (120, 136)  # heights 15, 8, 4, 2, 1; widths 17, 9, 5, 3, 2 per pyramid level


@pytest.fixture(scope="module")
def source_backbone() -> keras.Model:
    return get_model("resnet18", include_top=False, input_shape=(64, 64, 3))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, source_backbone) -> keras.Model:
    """ResNet-18 SSD at 120 x 136, its backbone loaded from a weight file."""
    weights = tmp_path_factory.mktemp("weights") / "resnet18.weights.h5"
    source_backbone.save_weights(weights)
    return ssd320(num_classes=3, backbone="resnet18", image_size=SIZE, backbone_weights=weights)


def _images(n: int = 2) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 255, (n, *SIZE, 3)).astype("float32")


@pytest.mark.backend_agnostic
def test_outputs_anchor_count_and_backbone_weights(tiny_model, source_backbone):
    model = tiny_model
    n = multiscale_anchors(SIZE).shape[0]
    assert n == (15 * 17 + 8 * 9 + 4 * 5 + 2 * 3 + 1 * 2) * 6 == 2130
    assert model.output["boxes"].shape == (None, n, 4)
    assert model.output["classes"].shape == (None, n, 3)

    # The backbone carries the file's weights (through the freezable batch-norm clone).
    backbone = model.get_layer("resnet18_backbone")
    for name, attr in (("conv1_conv", "kernel"), ("conv1_bn", "moving_variance")):
        np.testing.assert_array_equal(
            _np(getattr(backbone.get_layer(name), attr)),
            _np(getattr(source_backbone.get_layer(name), attr)),
        )
    # Every batch norm freezes its statistics; every conv kernel has L2.
    norms = [x for x in all_layers(model) if isinstance(x, keras.layers.BatchNormalization)]
    assert norms and all(isinstance(x, FreezableBatchNormalization) and x.frozen for x in norms)
    convs = [x for x in all_layers(model) if isinstance(x, keras.layers.Conv2D)]
    assert len(model.losses) == len(convs) == 20 + 7 + 10  # ResNet-18, FPN, head

    images = _images()
    out = model.predict(images, verbose=0)
    assert out["boxes"].shape == (2, n, 4) and out["classes"].shape == (2, n, 3)
    assert out["boxes"].dtype == np.float32 and out["classes"].dtype == np.float32
    assert np.all(np.isfinite(out["boxes"])) and np.all(np.isfinite(out["classes"]))
    # Frozen statistics: a training-mode call gives the same outputs and updates nothing.
    bn = backbone.get_layer("conv1_bn")
    mean_before = _np(bn.moving_mean).copy()
    in_training = model(images, training=True)
    np.testing.assert_allclose(_np(in_training["classes"]), out["classes"], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(_np(bn.moving_mean), mean_before)


def test_save_and_load_round_trip(tiny_model, tmp_path):
    images = _images()
    out = tiny_model(images, training=False)
    path = tmp_path / "ssd.keras"
    tiny_model.save(path)
    again = keras.models.load_model(path)(images, training=False)
    for key in ("boxes", "classes"):
        np.testing.assert_allclose(_np(again[key]), _np(out[key]), rtol=1e-5, atol=1e-5)


def _fixed_batch(anchors: np.ndarray, num_classes: int):
    rng = np.random.default_rng(1)
    images = rng.uniform(0, 255, (2, 128, 128, 3)).astype("float32")
    boxes = [
        np.array([[0.1, 0.1, 0.6, 0.5], [0.5, 0.4, 0.9, 0.95]], np.float32),
        np.zeros((0, 4), np.float32),  # an image without boxes
    ]
    labels = [np.array([0, 2]), np.zeros((0,), np.int32)]
    targets = [
        encode_targets(anchors, b, lab, num_classes=num_classes)
        for b, lab in zip(boxes, labels, strict=True)
    ]
    y = {key: np.stack([_np(t[key]) for t in targets]) for key in ("boxes", "classes")}
    return images, y


@pytest.mark.slow
@pytest.mark.backend_agnostic
def test_fit_steps_lower_the_loss():
    # Batch statistics here: frozen ones (the recipe) suit an ImageNet backbone, not a random
    # one (the frozen path is checked on `tiny_model` above). The means are subtracted here,
    # not by the model, and there is no weight decay: the loss is the SSD loss alone.
    model = ssd320(
        num_classes=3,
        backbone="resnet18_v1",
        image_size=128,
        freeze_batchnorm=False,
        include_preprocessing=False,
        weight_decay=0.0,
    )
    norms = [x for x in all_layers(model) if isinstance(x, FreezableBatchNormalization)]
    assert norms and not any(x.frozen for x in norms)
    assert not model.losses
    assert "subtract_channel_means" not in [layer.name for layer in model.layers]

    images, y = _fixed_batch(multiscale_anchors(128), 3)
    images = images - np.asarray(CHANNEL_MEANS, np.float32)
    assert y["boxes"][..., 4].sum() >= 2  # both ground-truth boxes own anchors
    before = float(SSDLoss()(y, model(images, training=True)))
    model.compile(
        optimizer=keras.optimizers.Adam(3e-4),
        loss={"boxes": SSDBoxLoss(), "classes": SSDClassLoss()},
        # Tracing this train step costs TensorFlow ~40 s of CPU, more than three eager steps;
        # JAX compiles (eager JAX is slower still). The traced forward pass is covered by
        # `predict` above.
        run_eagerly=keras.backend.backend() == "tensorflow",
    )
    losses = model.fit(images, y, batch_size=2, epochs=3, verbose=0).history["loss"]
    after = float(SSDLoss()(y, model(images, training=True)))
    # One step per epoch; `losses` holds the loss before each update, the first equals
    # `before`. (Measured: 1.91 -> 0.99 -> 0.59, then 0.37 after the third step.)
    assert losses[0] == pytest.approx(before, rel=1e-3)
    assert losses[0] > losses[1] > losses[2] > after
    assert after < 0.5 * before, (before, losses, after)


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backbone": "vgg16"}, "backbone must be a registered ResNet name"),
        ({"backbone": "resnet50_v2"}, "backbone must be a registered ResNet name"),
        ({"backbone": "resnet19"}, "unknown model 'resnet19'"),
        ({"num_classes": 0}, "num_classes must be an int >= 1; got 0"),
        ({"image_size": (320, 0)}, "image_size must be positive"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ssd320(**kwargs)


def test_legacy_backbone_file_of_an_unpublished_depth_keeps_its_stem(tmp_path, legacy_h5):
    # keras.applications' ResNet weights (50/101/152) take BGR: every cvbench ResNet built
    # from them reverses the stem's input channels (resnet.rgb_stem; SSD's ResNet-50 case:
    # tests/models/test_pretrained_weights.py). keras.applications publishes no ResNet-18, so a
    # legacy file of one is loaded as it is, stem included.
    source = get_model("resnet18", include_top=False, input_shape=(64, 64, 3))
    path = legacy_h5(source, tmp_path / "resnet18_notop.h5", seed=7)
    model = ssd320(num_classes=3, backbone="resnet18", image_size=SIZE, backbone_weights=path)
    stem = model.get_layer("resnet18_backbone").get_layer("conv1_conv").kernel
    np.testing.assert_array_equal(_np(stem), _np(source.get_layer("conv1_conv").kernel))
    block = model.get_layer("resnet18_backbone").get_layer("conv2_block1_1_conv").kernel
    np.testing.assert_array_equal(_np(block), _np(source.get_layer("conv2_block1_1_conv").kernel))
