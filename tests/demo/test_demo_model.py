import keras
import numpy as np
import pytest

from cvbench.demo.config import DemoConfig
from cvbench.demo.detect import demo_ssd
from cvbench.detection.anchors import multiscale_anchors
from cvbench.detection.backbone import copy_backbone_weights
from cvbench.models import resnet
from cvbench.utils.model_layers import all_layers
from cvbench.zoo import get_model

TINY = DemoConfig(det_image_size=64, ssd_depth=8, ssd_head_layers=1)


def build_demo_ssd(num_classes: int) -> keras.Model:
    return demo_ssd(TINY, num_classes=num_classes)


def build_classifier(name: str, *, num_classes: int, image_size: int) -> keras.Model:
    return get_model(
        name,
        num_classes=num_classes,
        input_shape=(image_size, image_size, 3),
        classifier_activation=None,
    )


def test_demo_ssd_outputs_one_row_per_anchor():
    model = build_demo_ssd(6)
    # At 64 px the P3..P7 maps are 8, 4, 2, 1, 1 (ceil(64 / 2^level)), 6 anchors each:
    # (64 + 16 + 4 + 1 + 1) * 6 = 516.
    assert multiscale_anchors(64).shape == (516, 4)
    assert model.output["boxes"].shape == (None, 516, 4)
    assert model.output["classes"].shape == (None, 516, 6)
    out = model(np.full((1, 64, 64, 3), 127.0, np.float32))
    # The class bias starts at -4.6 (prior 0.01); the towers are near zero at initialization.
    assert float(np.max(np.abs(np.asarray(out["classes"]) + 4.6))) < 0.5
    assert model.name == "demo_ssd" and model.get_layer("normalize") is not None
    # The demo's batch-norm momentum everywhere (the pyramid and head default to 0.997).
    momenta = {
        layer.momentum
        for layer in all_layers(model)
        if isinstance(layer, keras.layers.BatchNormalization)
    }
    assert momenta == {0.9}


def test_backbone_starts_from_the_classifier():
    classifier = build_classifier("resnet18", num_classes=6, image_size=64)
    rng = np.random.default_rng(0)
    for layer in classifier.layers:  # move every weight so a missed copy shows
        if layer.weights:
            layer.set_weights(
                [w + rng.uniform(0, 0.01, w.shape).astype(w.dtype) for w in layer.get_weights()]
            )
    detector = build_demo_ssd(6)
    assert copy_backbone_weights(classifier, detector) > 20  # 20 convs and 20 BNs in ResNet-18
    x = rng.uniform(-1, 1, (2, 64, 64, 3)).astype(np.float32)
    names = resnet.feature_layer_names(classifier)
    expected = keras.Model(classifier.input, classifier.get_layer(names["C5"]).output)(
        x, training=False
    )
    got = detector.get_layer("resnet18_backbone")([x], training=False)[2]
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-5)


def test_copy_refuses_a_different_backbone():
    # ResNet-50 has the same layer names as ResNet-18 but bottleneck (1x1) first convolutions.
    classifier = build_classifier("resnet50", num_classes=6, image_size=32)
    detector = build_demo_ssd(6)
    with pytest.raises(ValueError, match="no same-shaped layer"):
        copy_backbone_weights(classifier, detector)
    with pytest.raises(ValueError, match="backbone"):
        copy_backbone_weights(classifier, classifier)
