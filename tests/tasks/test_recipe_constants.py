"""Where cvbench already implements a recipe's knob as a constant or a default, the recipe's
value is that constant: a recipe that claims parity where the code differs fails here."""

from __future__ import annotations

import importlib
import inspect

from cvbench.tasks.recipes import get_recipe


def test_ssd320_fixed_knobs_are_the_model_and_loss_constants():
    # The modules themselves (the packages export functions of the same names, lazily).
    coco, box_coder, fpn, heads, postprocess, ssd = (
        importlib.import_module(f"cvbench.{name}")
        for name in (
            "data.read.coco",
            "detection.box_coder",
            "detection.fpn",
            "detection.heads",
            "detection.postprocess",
            "detection.ssd",
        )
    )
    from cvbench.detection.losses import SSDLoss

    d = get_recipe("ssd320_v1.2").detection
    loss = inspect.signature(SSDLoss).parameters
    assert d.box_coder_scales == box_coder.DEFAULT_SCALES
    assert (d.focal_alpha, d.focal_gamma) == (loss["alpha"].default, loss["gamma"].default)
    assert d.class_bias_init == heads.CLASS_BIAS_INIT
    assert (d.head_bn_momentum, d.head_bn_epsilon) == (fpn.BN_MOMENTUM, fpn.BN_EPSILON)
    assert tuple(ssd.CHANNEL_MEANS) == d.channel_means
    assert (d.score_threshold, d.iou_threshold) == (
        postprocess.SCORE_THRESHOLD,
        postprocess.IOU_THRESHOLD,
    )
    assert (d.max_per_class, d.max_total) == (postprocess.MAX_PER_CLASS, postprocess.MAX_TOTAL)
    assert d.max_boxes == coco.MAX_BOXES
    assert (d.crop_aspect_range, d.crop_area_range) == (
        coco.CROP_ASPECT_RATIO_RANGE,
        coco.CROP_AREA_RANGE,
    )


def test_resnet_preprocessing_is_the_nvidia_pipeline():
    preprocessing = importlib.import_module("cvbench.data.read.preprocessing")

    p = get_recipe("resnet50_v1.5_90e").preprocessing
    assert p.aspect_ratio_range == preprocessing.ASPECT_RATIO_RANGE
    assert p.area_range == preprocessing.AREA_RANGE
    assert p.min_object_covered == preprocessing.MIN_OBJECT_COVERED
    assert p.max_attempts == preprocessing.MAX_ATTEMPTS
    assert p.crop_fraction == preprocessing.EVAL_CROP_FRACTION
    assert (p.mean, p.std) == (tuple(preprocessing.MEAN_RGB), tuple(preprocessing.STD_RGB))
    assert {"dct_method": p.dct_method, "fancy_upscaling": p.fancy_upscaling} == (
        preprocessing.NVIDIA_JPEG_OPTIONS
    )
