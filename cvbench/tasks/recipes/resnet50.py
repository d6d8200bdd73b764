"""`resnet50_v1.5_90e` and `resnet50_v1.5_250e`: NVIDIA DeepLearningExamples' ResNet-50 v1.5
(TensorFlow/Classification/ConvNets), `resnet50v1.5/training/DGX1_RN50_AMP_90E.sh` and
`_250E.sh` and the code they run (`main.py`, `runtime/`, `model/resnet.py`, `utils/`).

Both scripts run `main.py` on 8 GPUs without `--dali`, so the TFRecord pipeline of
`utils/image_processing.py` is the reference's preprocessing.
"""

from __future__ import annotations

import functools

from cvbench.data import ImagePreprocessing
from cvbench.tasks.recipes.core import (
    CLASSIFICATION,
    Deviation,
    EvalKnobs,
    LossKnobs,
    ModelKnobs,
    Recipe,
    RunKnobs,
    Source,
)
from cvbench.training.config import OptimizerConfig, ScheduleConfig

DLE_REPO = "NVIDIA/DeepLearningExamples"
DLE_COMMIT = "729963dd47e7c8bd462ad10bfac7a7b0b604e6dd"
_ROOT = "TensorFlow/Classification/ConvNets/"


def _dle(path: str, line: int, last: int | None = None, note: str = "") -> Source:
    return Source(DLE_REPO, _ROOT + path, line, DLE_COMMIT, last=last, note=note)


def _sources(script: str) -> dict[str, Source]:
    sh = functools.partial(_dle, f"resnet50v1.5/training/{script}")
    model = functools.partial(_dle, "model/resnet.py")
    images = functools.partial(_dle, "utils/image_processing.py")
    return {
        "run.batch_per_gpu": sh(28, note="--batch_size=256 (per GPU)"),
        "run.reference_gpus": sh(26, note="mpiexec -np 8"),
        "run.precision": sh(30, note="--amp"),
        "run.epochs": sh(27, note="--iter_unit=epoch --num_iter"),
        "optimizer.name": model(333, note="tf.train.MomentumOptimizer"),
        "optimizer.momentum": sh(29, note="--momentum=0.875"),
        "optimizer.nesterov": model(333, note="MomentumOptimizer without use_nesterov"),
        "optimizer.weight_decay": sh(29, note="--weight_decay=3.0517578125e-05"),
        "optimizer.decay_bias": model(283, 298, note="the filter skips only batch-norm names"),
        "optimizer.decay_batchnorm": model(289, note="batchnorm / batch_norm names skipped"),
        "schedule.base_lr": sh(29, note="--lr_init=0.256"),
        "schedule.reference_batch": _dle("utils/learning_rate.py", 39, 42),
        "schedule.scaling": _dle(
            "utils/learning_rate.py", 39, 42, note="lr_init x num_gpus x batch_size / 256"
        ),
        "schedule.decay": sh(28, note="--cosine_lr"),
        "schedule.decay_from": _dle(
            "utils/learning_rate.py", 48, note="cosine_decay(rescaled_lr, global_step, ...)"
        ),
        "schedule.warmup_start_factor": _dle(
            "utils/learning_rate.py", 60, note="rescaled_lr x step / warmup_steps"
        ),
        "schedule.warmup_epochs": sh(29, note="--lr_warmup_epochs=8"),
        "schedule.end_factor": _dle(
            "runtime/runner_utils.py", 32, 34, note="cosine over num_decay_steps = num_steps"
        ),
        "loss.dynamic_loss_scale": _dle("main.py", 97, note="static when --static_loss_scale"),
        "loss.loss_scale": sh(30, note="--static_loss_scale 128"),
        "loss.label_smoothing": sh(28, note="--label_smoothing 0.1"),
        "loss.smoothing_classes": model(151, 153, note="n_classes = 1001 (main.py:61)"),
        "model.num_classes": _dle("main.py", 61, note="n_classes=1001"),
        "model.bn_momentum": model(77, note="batch norm decay=0.9"),
        "model.bn_epsilon": model(78),
        "model.bn_scale": model(79),
        "model.conv_initializer": model(
            90, 92, note="variance_scaling(2.0, truncated_normal, mode=--weight_init=fan_in)"
        ),
        "model.dense_initializer": model(97, 99, note="same initializer for the FC layer"),
        "model.image_size": images(23),
        "preprocessing.aspect_ratio_range": images(57),
        "preprocessing.area_range": images(58),
        "preprocessing.min_object_covered": images(56),
        "preprocessing.max_attempts": images(59),
        "preprocessing.eval_crop": images(150, 151, note="shorter side to 256, central crop"),
        "preprocessing.crop_fraction": images(22, 23, note="224 / _RESIZE_MIN 256"),
        "preprocessing.input_scaling": _dle("utils/data_utils.py", 151, 169),
        "preprocessing.mean": _dle("utils/data_utils.py", 28, 31),
        "preprocessing.std": _dle("utils/data_utils.py", 32),
        "preprocessing.resize_method": images(132),
        "preprocessing.dct_method": images(49),
        "preprocessing.fancy_upscaling": images(49),
        "eval.images": _dle("runtime/runner_utils.py", 62, note="every validation record"),
        "eval.drop_remainder": _dle("utils/data_utils.py", 102),
        "eval.batch_size": _dle("main.py", 113, 117, note="rank 0 alone, --batch_size"),
    }


_EVAL_DEVIATION = Deviation(
    "eval.drop_remainder",
    True,
    "DLE evaluates on rank 0 in batches of 256 and drops the last partial batch: "
    "50,000 // 256 = 195 batches = 49,920 images, read with interleave(cycle_length=10, "
    "block_length=8) (utils/data_utils.py:93). We evaluate every one of the 50,000 images once "
    "across all ranks; docs/recipes.md shows how to count DLE's 49,920 instead.",
)


_CLASSES_DEVIATION = Deviation(
    "model.num_classes",
    1001,
    "DLE's classifier has 1001 outputs (main.py:61) but shifts the labels to 0..999 "
    "(utils/image_processing.py:138), so output 1000 is never a label. We build the standard "
    "1000 outputs and smooth as over 1001 classes (loss.smoothing_classes), which gives the "
    "1000 real classes DLE's targets: 1 - 0.1 + 0.1/1001 and 0.1/1001.",
)


#: DLE's ResNet-50 v1.5 model (the sources: `_sources`).
_MODEL = ModelKnobs(
    image_size=224,
    num_classes=1000,
    bn_momentum=0.9,
    bn_epsilon=1e-5,
    bn_scale=True,
    conv_initializer="fan_in_truncated",
    dense_initializer="fan_in_truncated",
)
#: DLE's ResNet-50 v1.5 input pipeline (the sources: `_sources`).
_PREPROCESSING = ImagePreprocessing(
    aspect_ratio_range=(0.75, 1.33),
    area_range=(0.05, 1.0),
    min_object_covered=0.1,
    max_attempts=100,
    eval_crop="center_crop",
    crop_fraction=0.875,
    input_scaling="mean_std",
    mean=(123.68, 116.28, 103.53),
    std=(58.395, 57.12, 57.385),
    resize_method="bilinear",
    dct_method="INTEGER_FAST",
    fancy_upscaling=False,
)


def _recipe(name: str, *, epochs: int, mixup: float, script: str, summary: str) -> Recipe:
    sources = _sources(script)
    sources["loss.mixup_alpha"] = (
        _dle(f"resnet50v1.5/training/{script}", 27, note=f"--mixup={mixup}")
        if mixup
        else _dle("utils/cmdline_helper.py", 93, 97, note="--mixup not passed: default 0.0")
    )
    return Recipe(
        name=name,
        model="resnet50",
        task=CLASSIFICATION,
        summary=summary,
        run=RunKnobs(batch_per_gpu=256, reference_gpus=8, precision="fp16", epochs=epochs),
        optimizer=OptimizerConfig(
            name="sgd",
            momentum=0.875,
            nesterov=False,
            weight_decay=3.0517578125e-05,
            decay_bias=True,
            decay_batchnorm=False,
        ),
        schedule=ScheduleConfig(
            base_lr=0.256,
            reference_batch=256,
            scaling="linear",
            decay="cosine",
            decay_from="start",
            warmup_start_factor=0.0,
            warmup_epochs=8,
            end_factor=0.0,
        ),
        loss=LossKnobs(
            dynamic_loss_scale=False,
            loss_scale=128.0,
            label_smoothing=0.1,
            smoothing_classes=1001,
            mixup_alpha=mixup,
        ),
        model_knobs=_MODEL,
        preprocessing=_PREPROCESSING,
        eval=EvalKnobs(images=50000, drop_remainder=False, batch_size=256),
        sources=sources,
        deviations=(_CLASSES_DEVIATION, _EVAL_DEVIATION),
    )


RESNET50_V15_90E = _recipe(
    "resnet50_v1.5_90e",
    epochs=90,
    mixup=0.0,
    script="DGX1_RN50_AMP_90E.sh",
    summary="NVIDIA DLE ResNet-50 v1.5, 90 epochs, 8 x 256, AMP (top-1 76.9-77.0%)",
)
RESNET50_V15_250E = _recipe(
    "resnet50_v1.5_250e",
    epochs=250,
    mixup=0.2,
    script="DGX1_RN50_AMP_250E.sh",
    summary="NVIDIA DLE ResNet-50 v1.5, 250 epochs with mixup 0.2, 8 x 256, AMP (top-1 78%+)",
)
