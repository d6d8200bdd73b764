"""`ssd320_v1.2`: NVIDIA DeepLearningExamples' SSD320 v1.2 (TensorFlow/Detection/SSD), the
8-GPU configuration `configs/ssd320_full_8gpus.config` run by
`examples/SSD320_FP16_8GPU.sh` (COCO val2017 AP 0.273-0.282).

The run is counted in images: 12,500 steps of 8 x 32 = 3,200,000 images. The 1- and 4-GPU
configurations of the same directory keep that number and scale the rate linearly (1 GPU:
100,000 steps of 32, base 0.02, warmup 8,000 steps from 0.0086664), which is how the recipe
scales to any global batch (`consumers.plan`).
"""

from __future__ import annotations

import functools

from cvbench.tasks.recipes.core import (
    DETECTION,
    DetectionKnobs,
    Deviation,
    LossKnobs,
    Recipe,
    RunKnobs,
    Source,
)
from cvbench.tasks.recipes.resnet50 import DLE_COMMIT, DLE_REPO
from cvbench.training.config import OptimizerConfig, ScheduleConfig

_ROOT = "TensorFlow/Detection/SSD/"


def _src(path: str, line: int, last: int | None = None, note: str = "") -> Source:
    return Source(DLE_REPO, _ROOT + path, line, DLE_COMMIT, last=last, note=note)


_cfg = functools.partial(_src, "configs/ssd320_full_8gpus.config")
_sh = functools.partial(_src, "examples/SSD320_FP16_8GPU.sh")
_schedules = functools.partial(_src, "models/research/object_detection/utils/learning_schedules.py")

SOURCES = {
    "run.batch_per_gpu": _cfg(150),
    "run.reference_gpus": _sh(17, note="GPUS=8"),
    "run.precision": _sh(40, note="--amp"),
    "run.images": _cfg(150, 154, note="num_steps 12500 x 8 GPUs x 32"),
    "optimizer.name": _cfg(170, note="momentum_optimizer"),
    "optimizer.momentum": _cfg(179),
    "optimizer.nesterov": _cfg(170, note="momentum_optimizer (no Nesterov)"),
    "optimizer.weight_decay": _cfg(169, 182, note="none in the optimizer: L2 regularizers"),
    "schedule.base_lr": _cfg(173),
    "schedule.reference_batch": _cfg(150, 153, note="32 per GPU x 8 replicas"),
    "schedule.scaling": _src(
        "configs/ssd320_full_1gpus.config", 173, note="0.02 at 1 x 32 = 0.16 x 32 / 256"
    ),
    "schedule.decay": _cfg(172, note="cosine_decay_learning_rate"),
    "schedule.decay_from": _schedules(100, 103, note="cos(pi (step - warmup) / (total - warmup))"),
    "schedule.warmup_start_factor": _cfg(175, note="0.0693312 / 0.16 = 0.43332"),
    "schedule.warmup_fraction": _cfg(174, 176, note="1000 of 12500 steps"),
    "schedule.end_factor": _schedules(100, 103, note="0.5 base (1 + cos(pi)) = 0 at the end"),
    "loss.dynamic_loss_scale": _src(
        "models/research/object_detection/model_main.py",
        114,
        115,
        note="--amp: TF_ENABLE_AUTO_MIXED_PRECISION (dynamic loss scaling)",
    ),
    "loss.label_smoothing": _cfg(120, 125, note="sigmoid focal loss, no smoothing"),
    "loss.mixup_alpha": _cfg(155, 168, note="flip and crop only"),
    "detection.backbone": _cfg(91, note="ssd_resnet50_v1_fpn"),
    "detection.backbone_weights": _cfg(148, 149, note="fine_tune_checkpoint resnet_v1_50"),
    "detection.freeze_batchnorm": _cfg(23),
    "detection.image_size": _cfg(58, 61, note="fixed_shape_resizer 320 x 320"),
    "detection.num_classes": _cfg(24),
    "detection.flip": _cfg(156),
    "detection.crop_aspect_range": _cfg(162, 163),
    "detection.crop_area_range": _cfg(164, 165),
    "detection.crop_min_object_covered": _cfg(161),
    "detection.color_jitter": _cfg(
        155, 168, note="flip and crop only; the README (line 367) lists colour jitter"
    ),
    "detection.max_boxes": _cfg(183),
    "detection.score_threshold": _cfg(137),
    "detection.iou_threshold": _cfg(138),
    "detection.max_per_class": _cfg(139),
    "detection.max_total": _cfg(140),
    "detection.l2_weight": _cfg(69, 72, note="and 100-104 for the feature extractor"),
    "detection.activation": _cfg(68, note="RELU_6, FPN too (line 99)"),
    "detection.backbone_activation": _src(
        "models/research/object_detection/models/ssd_resnet_v1_fpn_feature_extractor.py",
        165,
        168,
        note="the conv hyperparams (RELU_6) override slim's; resnet_v1.py:135 relu after adds",
    ),
    "detection.channel_means": _src(
        "models/research/object_detection/models/ssd_resnet_v1_fpn_feature_extractor.py",
        128,
        129,
        note="resized_inputs - channel_means",
    ),
    "detection.box_coder_scales": _cfg(27, 30),
    "detection.focal_alpha": _cfg(122),
    "detection.focal_gamma": _cfg(123),
    "detection.class_bias_init": _cfg(66),
    "detection.head_bn_momentum": _cfg(82, note="batch norm decay, FPN too (line 113)"),
    "detection.head_bn_epsilon": _cfg(83, note="FPN too (line 114)"),
}

SSD320_V12 = Recipe(
    name="ssd320_v1.2",
    model="ssd320",
    task=DETECTION,
    summary="NVIDIA DLE SSD320 v1.2, 12,500 steps of 8 x 32, AMP (COCO AP 0.273-0.282)",
    run=RunKnobs(batch_per_gpu=32, reference_gpus=8, precision="fp16", images=3_200_000),
    optimizer=OptimizerConfig(name="sgd", momentum=0.9, nesterov=False, weight_decay=0.0),
    schedule=ScheduleConfig(
        base_lr=0.16,
        reference_batch=256,
        scaling="linear",
        decay="cosine",
        decay_from="warmup_end",
        warmup_start_factor=0.43332,
        warmup_fraction=0.08,
        end_factor=0.0,
    ),
    loss=LossKnobs(dynamic_loss_scale=True, label_smoothing=0.0),
    detection=DetectionKnobs(
        backbone="resnet50_v1",
        backbone_weights="imagenet",
        freeze_batchnorm=True,
        image_size=320,
        num_classes=90,
        flip=True,
        crop_aspect_range=(0.75, 3.0),
        crop_area_range=(0.75, 1.0),
        crop_min_object_covered=0.0,
        color_jitter=False,
        max_boxes=100,
        score_threshold=1e-8,
        iou_threshold=0.6,
        max_per_class=100,
        max_total=100,
        l2_weight=4e-4,
        activation="relu6",
        backbone_activation="relu",
        channel_means=(123.68, 116.779, 103.939),
        box_coder_scales=(10.0, 10.0, 5.0, 5.0),
        focal_alpha=0.25,
        focal_gamma=2.0,
        class_bias_init=-4.6,
        head_bn_momentum=0.997,
        head_bn_epsilon=0.001,
    ),
    sources=SOURCES,
    deviations=(
        Deviation(
            "detection.backbone_weights",
            "tf-slim resnet_v1_50_2016_08_28",
            "The reference starts from TF-slim's ResNet-50 v1 ImageNet checkpoint "
            "(download_all.sh:28), a TF1 checkpoint no Keras layout loads. 'imagenet' is "
            "keras.applications' ResNet-50 (v1, same architecture, another ImageNet training).",
        ),
        Deviation(
            "detection.backbone_activation",
            "relu6 in the blocks, relu after each residual add",
            "With override_base_feature_extractor_hyperparams (config line 117) the RELU_6 of "
            "the conv hyperparams reaches the backbone's convs too. The keras.applications "
            "weights we start from were trained with ReLU, so the backbone keeps ReLU.",
        ),
    ),
)
