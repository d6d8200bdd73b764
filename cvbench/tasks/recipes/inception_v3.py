"""`inception_v3_nvcnn`: Inception V3 as NVIDIA's `nvcnn_hvd.py` (v1.1) trains it, with the
command of its README (8 GPUs x 128, `--larc_mode=clip --larc_eta=0.003 --loss_scale=128
--num_epochs=90 --learning_rate=1.0`; top-1 77.8%).

Both files are in NVIDIA/DeepLearningExamples at the commit that added them
(`TensorFlow/Classification/imagenet/`, removed from the repository later).
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
from cvbench.tasks.recipes.resnet50 import DLE_REPO
from cvbench.training.config import OptimizerConfig, ScheduleConfig

NVCNN_COMMIT = "2fdaec9c85c8b518cbfe21b783374c1b82589903"
_DIR = "TensorFlow/Classification/imagenet/"


def _src(path: str, line: int, last: int | None = None, note: str = "") -> Source:
    return Source(DLE_REPO, _DIR + path, line, NVCNN_COMMIT, last=last, note=note)


_readme = functools.partial(_src, "README.md")
_code = functools.partial(_src, "nvcnn_hvd.py")

SOURCES = {
    "run.batch_per_gpu": _readme(50, note="--batch_size=128"),
    "run.reference_gpus": _readme(47, note="mpiexec -np 8"),
    "run.precision": _readme(51, note="--fp16"),
    "run.epochs": _readme(57, note="--num_epochs=90"),
    "optimizer.name": _code(559, 581, note="LARC over MomentumOptimizer"),
    "optimizer.momentum": _code(1177),
    "optimizer.nesterov": _code(547, 548, note="use_nesterov=True"),
    "optimizer.weight_decay": _code(1182),
    "optimizer.decay_bias": _code(1290, 1296, note="l2_loss over every trainable variable"),
    "optimizer.decay_batchnorm": _code(1290, 1296, note="l2_loss over every trainable variable"),
    "optimizer.larc_eta": _readme(53, note="--larc_eta=0.003"),
    "optimizer.larc_mode": _readme(52, note="--larc_mode=clip"),
    "optimizer.larc_epsilon": _code(1186),
    "schedule.base_lr": _readme(59, note="--learning_rate=1.0"),
    "schedule.reference_batch": _readme(47, 50, note="8 GPUs x 128"),
    "schedule.scaling": _code(473, 474, note="polynomial_decay(FLAGS.learning_rate, ...)"),
    "schedule.decay": _code(1178, note="lr_decay_policy = 'poly'"),
    "schedule.decay_from": _code(473, 479, note="from global_step 0"),
    "schedule.warmup_start_factor": _code(472, 479, note="no warmup"),
    "schedule.warmup_epochs": _code(472, 479, note="no warmup"),
    "schedule.power": _code(1181),
    "schedule.end_factor": _code(477, note="end_learning_rate=0."),
    "loss.dynamic_loss_scale": _code(550, 557, note="loss x loss_scale, grads x 1/loss_scale"),
    "loss.loss_scale": _readme(54, note="--loss_scale=128"),
    "loss.label_smoothing": _code(1287, 1288, note="sparse_softmax_cross_entropy, no smoothing"),
    "loss.mixup_alpha": _code(1287, 1288, note="plain cross-entropy of the batch"),
    "model.num_classes": _code(1161),
    "model.bn_momentum": _code(89, note="batch norm decay 0.9"),
    "model.bn_epsilon": _code(90),
    "model.bn_scale": _code(91),
    "model.conv_initializer": _code(108, 109, note="glorot_uniform unless given"),
    "model.dense_initializer": _code(108, 109, note="glorot_uniform unless given"),
    "model.last_block_pooling": _code(800, note="inception_v3_e(net, x, 'MAX')"),
    "model.image_size": _code(1242),
    "preprocessing.aspect_ratio_range": _code(346),
    "preprocessing.area_range": _code(347),
    "preprocessing.min_object_covered": _code(345),
    "preprocessing.max_attempts": _code(348),
    "preprocessing.eval_crop": _code(340, 357, note="central_crop, then resize to 299"),
    "preprocessing.crop_fraction": _code(340, note="central_crop(image, 224./256.)"),
    "preprocessing.input_scaling": _code(146, note="x * (1./127.5) - 1"),
    "preprocessing.resize_method": _code(
        353, 357, note="TF1 resize_images(BILINEAR, align_corners=False): no half-pixel centres"
    ),
    "preprocessing.flip": _code(408, note="random_flip_left_right after the resize"),
    "preprocessing.quantize_uint8": _code(
        444, 445, note="clip to [0, 255], cast to the preprocessor's dtype (uint8, line 386)"
    ),
    "preprocessing.dct_method": _code(332),
    "preprocessing.fancy_upscaling": _code(331),
    "eval.images": _code(1172, note="get_num_records of validation-*"),
    "eval.drop_remainder": _code(1364, note="nstep = nrecord // batch_size"),
}

INCEPTION_V3_NVCNN = Recipe(
    name="inception_v3_nvcnn",
    model="inception_v3",
    task=CLASSIFICATION,
    summary="nvcnn_hvd.py Inception V3, 90 epochs, 8 x 128, LARC, fp16 (top-1 77.8%)",
    run=RunKnobs(batch_per_gpu=128, reference_gpus=8, precision="fp16", epochs=90),
    optimizer=OptimizerConfig(
        name="lars",
        momentum=0.9,
        nesterov=True,
        weight_decay=1e-4,
        decay_bias=True,
        decay_batchnorm=True,
        larc_eta=0.003,
        larc_mode="clip",
        larc_epsilon=1.0,
    ),
    schedule=ScheduleConfig(
        base_lr=1.0,
        reference_batch=1024,
        scaling="linear",
        decay="polynomial",
        decay_from="start",
        warmup_start_factor=0.0,
        warmup_epochs=0.0,
        power=2.0,
        end_factor=0.0,
    ),
    loss=LossKnobs(dynamic_loss_scale=False, loss_scale=128.0, label_smoothing=0.0),
    model_knobs=ModelKnobs(
        image_size=299,
        num_classes=1000,
        bn_momentum=0.9,
        bn_epsilon=1e-4,
        bn_scale=True,
        conv_initializer="glorot_uniform",
        dense_initializer="glorot_uniform",
        last_block_pooling="max",
    ),
    preprocessing=ImagePreprocessing(
        aspect_ratio_range=(0.8, 1.25),
        area_range=(0.1, 1.0),
        min_object_covered=0.1,
        max_attempts=100,
        eval_crop="crop_then_resize",
        crop_fraction=0.875,
        input_scaling="inception",
        resize_method="bilinear_tf1",
        dct_method="INTEGER_FAST",
        fancy_upscaling=False,
        flip=True,
        quantize_uint8=True,
    ),
    eval=EvalKnobs(images=50000, drop_remainder=False),
    sources=SOURCES,
    deviations=(
        Deviation(
            "schedule.scaling",
            "none",
            "nvcnn uses --learning_rate as given, whatever the batch. We scale it linearly "
            "from 1.0 at 1,024 images (0.25 per 256), so that fewer GPUs keep the rate per "
            "image; at 8 x 128 both are 1.0. Pass the learning rate yourself to follow nvcnn.",
        ),
        Deviation(
            "eval.drop_remainder",
            True,
            "nvcnn evaluates on one GPU for nrecord // batch_size steps: 390 x 128 (or "
            "195 x 256) = 49,920 images. We evaluate every one of the 50,000 images once.",
        ),
    ),
)
