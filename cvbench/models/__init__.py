"""Classification builders: ResNet 18-152 (v1 / v1.5) and Inception V3, keyword-only.

    >>> from cvbench.models import resnet18
    >>> resnet18(num_classes=10, input_shape=(64, 64, 3)).output_shape
    (None, 10)

Builders by name (classifiers and detectors together) are in the one model table,
`cvbench.zoo` (`get_model`, `list_models`), which sits above this package. This package uses
`keras.layers` / `keras.ops` only, so it works on any Keras backend; it imports no other
cvbench package.

Starting points: `weights="imagenet"` (keras.applications' files, `imagenet_weights`), any
keras.applications / cvbench weight file (`load_weights`), torchvision ResNet state dicts
(`load_torchvision_weights`).

Inception V3's builder is `cvbench.models.inception_v3.inception_v3` (not re-exported here:
the function would hide its module of the same name).
"""

from __future__ import annotations

from cvbench.models.pretrained import imagenet_weights
from cvbench.models.resnet import build_resnet, resnet18, resnet34, resnet50, resnet101, resnet152
from cvbench.models.torchvision_weights import load_torchvision_weights
from cvbench.models.weights import load_weights

__all__ = [
    "build_resnet",
    "imagenet_weights",
    "load_torchvision_weights",
    "load_weights",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
]
