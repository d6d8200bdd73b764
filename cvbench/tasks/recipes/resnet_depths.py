"""`resnet18_cvbench`, `resnet34_cvbench`, `resnet101_cvbench`, `resnet152_cvbench`: the
defaults of the ResNets NVIDIA publishes no recipe for.

Each is `resnet50_v1.5_90e` (NVIDIA DLE's ResNet-50 v1.5, 90 epochs: its optimizer, rate,
warmup, label smoothing, crops) at another depth, with the settings cvbench has always trained
these depths with where they differ, each recorded as a deviation from DLE's value:
Keras-style dynamic loss scaling, the builder's own initializers and batch-norm epsilon, the
cosine counted after the warmup, biases not decayed, TensorFlow's default JPEG decoder, and
label smoothing over the model's own classes.
"""

from __future__ import annotations

from cvbench.data import ImagePreprocessing
from cvbench.tasks.recipes.core import Recipe
from cvbench.tasks.recipes.resnet50 import RESNET50_V15_90E

DEPTHS = (18, 34, 101, 152)

_DEFAULTS = ImagePreprocessing()
#: The ResNet builder's batch-norm epsilon (`cvbench.models.resnet.BN_EPSILON`, as
#: keras.applications; tests/tasks check the two agree).
BUILDER_BN_EPSILON = 1.001e-5
#: What the other depths change of `resnet50_v1.5_90e` (knob -> cvbench's value).
CVBENCH_CHANGES = {
    "schedule.decay_from": "warmup_end",
    "optimizer.decay_bias": False,
    "loss.dynamic_loss_scale": True,
    "loss.loss_scale": None,
    "loss.smoothing_classes": None,
    "model.bn_epsilon": BUILDER_BN_EPSILON,
    "model.conv_initializer": "fan_out",
    "model.dense_initializer": "normal_0.01",
    "preprocessing.dct_method": _DEFAULTS.dct_method,
    "preprocessing.fancy_upscaling": _DEFAULTS.fancy_upscaling,
}
REASON = (
    "cvbench default: NVIDIA publishes no recipe for this depth; cvbench trains it with "
    "resnet50_v1.5_90e's knobs except these, its long-standing defaults"
)


def depth_recipe(depth: int) -> Recipe:
    """The `resnet{depth}_cvbench` recipe (see the module docstring)."""
    return RESNET50_V15_90E.for_model(
        name=f"resnet{depth}_cvbench",
        model=f"resnet{depth}",
        summary=(
            f"cvbench default for ResNet-{depth}: DLE's ResNet-50 v1.5 90-epoch recipe with "
            "cvbench's loss scaling, initializers and decay (no published reference)"
        ),
        changes=CVBENCH_CHANGES,
        reason=REASON,
    )


DEPTH_RECIPES = tuple(depth_recipe(depth) for depth in DEPTHS)
