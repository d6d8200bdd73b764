"""Parity of each named recipe with its reference, knob by knob.

The tables below are the reference values as read in the reference's own files, each with
its source (repository, file, line at a commit). Every knob a recipe sets must have a row
(a new knob without one fails), the recipe's reference value and source must be the row's,
and the recipe's own value must equal it except for the deliberate differences listed here
(and in docs/recipes.md) with our value.
"""

from __future__ import annotations

import pytest

from cvbench.tasks.recipes import get_recipe, list_recipes

DLE = "NVIDIA/DeepLearningExamples"
DLE_COMMIT = "729963dd47e7c8bd462ad10bfac7a7b0b604e6dd"  # master, 2024-04-04
NVCNN_COMMIT = "2fdaec9c85c8b518cbfe21b783374c1b82589903"  # "Add TensorFlow examples", 2018
CONVNETS = "TensorFlow/Classification/ConvNets/"
RN50_90E = CONVNETS + "resnet50v1.5/training/DGX1_RN50_AMP_90E.sh"
RN50_250E = CONVNETS + "resnet50v1.5/training/DGX1_RN50_AMP_250E.sh"
DLE_MODEL = CONVNETS + "model/resnet.py"
DLE_LR = CONVNETS + "utils/learning_rate.py"
DLE_IMAGES = CONVNETS + "utils/image_processing.py"
DLE_DATA = CONVNETS + "utils/data_utils.py"
NVCNN = "TensorFlow/Classification/imagenet/nvcnn_hvd.py"
NVCNN_README = "TensorFlow/Classification/imagenet/README.md"
SSD_DIR = "TensorFlow/Detection/SSD/"
SSD_CFG = SSD_DIR + "configs/ssd320_full_8gpus.config"
SSD_OD = SSD_DIR + "models/research/object_detection/"


def _resnet_rows(script: str) -> list[tuple]:
    """(knob, reference value, file, first line): the DLE scripts' flags and the code they run."""
    return [
        # mpiexec -np 8 python3 main.py ... --batch_size=256 ... --amp --static_loss_scale 128
        ("run.batch_per_gpu", 256, script, 28),
        ("run.reference_gpus", 8, script, 26),
        ("run.precision", "fp16", script, 30),
        ("optimizer.name", "sgd", DLE_MODEL, 333),  # tf.train.MomentumOptimizer
        ("optimizer.momentum", 0.875, script, 29),
        ("optimizer.nesterov", False, DLE_MODEL, 333),
        ("optimizer.weight_decay", 3.0517578125e-05, script, 29),
        # loss_filter_fn drops only "batchnorm"/"batch_norm"/"batch_normalization" names:
        # the FC bias is decayed, BN beta/gamma are not.
        ("optimizer.decay_bias", True, DLE_MODEL, 283),
        ("optimizer.decay_batchnorm", False, DLE_MODEL, 289),
        ("schedule.base_lr", 0.256, script, 29),
        # base_lr = lr_init * num_gpus * (batch_size / 256.0): linear in the global batch.
        ("schedule.reference_batch", 256, DLE_LR, 39),
        ("schedule.scaling", "linear", DLE_LR, 39),
        ("schedule.decay", "cosine", script, 28),
        # lr = cosine_decay(rescaled_lr, global_step, num_decay_steps): from step 0.
        ("schedule.decay_from", "start", DLE_LR, 48),
        # warmup_lr = rescaled_lr * global_step / warmup_steps: from 0.
        ("schedule.warmup_start_factor", 0.0, DLE_LR, 60),
        ("schedule.warmup_epochs", 8, script, 29),
        ("schedule.end_factor", 0.0, CONVNETS + "runtime/runner_utils.py", 32),
        ("loss.dynamic_loss_scale", False, CONVNETS + "main.py", 97),
        ("loss.loss_scale", 128.0, script, 30),
        ("loss.label_smoothing", 0.1, script, 28),
        # on_value = 1 - eta + eta / n_cls with n_cls = n_classes = 1001.
        ("loss.smoothing_classes", 1001, DLE_MODEL, 151),
        ("model.num_classes", 1001, CONVNETS + "main.py", 61),
        ("model.bn_momentum", 0.9, DLE_MODEL, 77),
        ("model.bn_epsilon", 1e-5, DLE_MODEL, 78),
        ("model.bn_scale", True, DLE_MODEL, 79),
        # variance_scaling_initializer(scale=2.0, truncated_normal, mode=--weight_init=fan_in)
        ("model.conv_initializer", "fan_in_truncated", DLE_MODEL, 90),
        ("model.dense_initializer", "fan_in_truncated", DLE_MODEL, 97),
        ("model.image_size", 224, DLE_IMAGES, 23),
        ("preprocessing.aspect_ratio_range", (0.75, 1.33), DLE_IMAGES, 57),
        ("preprocessing.area_range", (0.05, 1.0), DLE_IMAGES, 58),
        ("preprocessing.min_object_covered", 0.1, DLE_IMAGES, 56),
        ("preprocessing.max_attempts", 100, DLE_IMAGES, 59),
        ("preprocessing.eval_crop", "center_crop", DLE_IMAGES, 150),
        ("preprocessing.crop_fraction", 0.875, DLE_IMAGES, 22),  # 224 / _RESIZE_MIN 256
        ("preprocessing.input_scaling", "mean_std", DLE_DATA, 151),
        ("preprocessing.mean", (123.68, 116.28, 103.53), DLE_DATA, 28),
        ("preprocessing.std", (58.395, 57.12, 57.385), DLE_DATA, 32),
        ("preprocessing.resize_method", "bilinear", DLE_IMAGES, 132),
        ("preprocessing.dct_method", "INTEGER_FAST", DLE_IMAGES, 49),
        ("preprocessing.fancy_upscaling", False, DLE_IMAGES, 49),
        ("eval.images", 50000, CONVNETS + "runtime/runner_utils.py", 62),
        ("eval.drop_remainder", True, DLE_DATA, 102),  # batch(..., drop_remainder=True)
        ("eval.batch_size", 256, CONVNETS + "main.py", 113),
    ]


REFERENCES = {
    "resnet50_v1.5_90e": (
        DLE_COMMIT,
        [
            *_resnet_rows(RN50_90E),
            ("run.epochs", 90, RN50_90E, 27),
            ("loss.mixup_alpha", 0.0, CONVNETS + "utils/cmdline_helper.py", 93),
        ],
    ),
    "resnet50_v1.5_250e": (
        DLE_COMMIT,
        [
            *_resnet_rows(RN50_250E),
            ("run.epochs", 250, RN50_250E, 27),
            ("loss.mixup_alpha", 0.2, RN50_250E, 27),  # --mixup=0.2
        ],
    ),
    "inception_v3_nvcnn": (
        NVCNN_COMMIT,
        [
            # mpiexec -np 8 python nvcnn_hvd.py --model=inception3 --batch_size=128 --fp16
            # --larc_mode=clip --larc_eta=0.003 --loss_scale=128 --num_epochs=90
            # --learning_rate=1.0
            ("run.batch_per_gpu", 128, NVCNN_README, 50),
            ("run.reference_gpus", 8, NVCNN_README, 47),
            ("run.precision", "fp16", NVCNN_README, 51),
            ("run.epochs", 90, NVCNN_README, 57),
            ("optimizer.name", "lars", NVCNN, 559),  # LARC over momentum
            ("optimizer.momentum", 0.9, NVCNN, 1177),
            ("optimizer.nesterov", True, NVCNN, 547),
            ("optimizer.weight_decay", 1e-4, NVCNN, 1182),
            # l2_loss over every trainable variable of the scope: biases and BN too.
            ("optimizer.decay_bias", True, NVCNN, 1290),
            ("optimizer.decay_batchnorm", True, NVCNN, 1290),
            ("optimizer.larc_eta", 0.003, NVCNN_README, 53),
            ("optimizer.larc_mode", "clip", NVCNN_README, 52),
            ("optimizer.larc_epsilon", 1.0, NVCNN, 1186),
            ("schedule.base_lr", 1.0, NVCNN_README, 59),
            ("schedule.reference_batch", 1024, NVCNN_README, 47),  # 8 x 128
            ("schedule.scaling", "none", NVCNN, 473),  # polynomial_decay(FLAGS.learning_rate
            ("schedule.decay", "polynomial", NVCNN, 1178),
            ("schedule.decay_from", "start", NVCNN, 473),
            ("schedule.warmup_start_factor", 0.0, NVCNN, 472),
            ("schedule.warmup_epochs", 0.0, NVCNN, 472),
            ("schedule.power", 2.0, NVCNN, 1181),
            ("schedule.end_factor", 0.0, NVCNN, 477),
            ("loss.dynamic_loss_scale", False, NVCNN, 550),
            ("loss.loss_scale", 128.0, NVCNN_README, 54),
            ("loss.label_smoothing", 0.0, NVCNN, 1287),
            ("loss.mixup_alpha", 0.0, NVCNN, 1287),
            ("model.num_classes", 1000, NVCNN, 1161),
            ("model.bn_momentum", 0.9, NVCNN, 89),
            ("model.bn_epsilon", 1e-4, NVCNN, 90),
            ("model.bn_scale", True, NVCNN, 91),
            ("model.conv_initializer", "glorot_uniform", NVCNN, 108),
            ("model.dense_initializer", "glorot_uniform", NVCNN, 108),
            ("model.last_block_pooling", "max", NVCNN, 800),  # inception_v3_e(net, x, 'MAX')
            ("model.image_size", 299, NVCNN, 1242),
            ("preprocessing.aspect_ratio_range", (0.8, 1.25), NVCNN, 346),
            ("preprocessing.area_range", (0.1, 1.0), NVCNN, 347),
            ("preprocessing.min_object_covered", 0.1, NVCNN, 345),
            ("preprocessing.max_attempts", 100, NVCNN, 348),
            ("preprocessing.eval_crop", "crop_then_resize", NVCNN, 340),
            ("preprocessing.crop_fraction", 0.875, NVCNN, 340),  # central_crop(image, 224./256.)
            ("preprocessing.input_scaling", "inception", NVCNN, 146),  # x * (1./127.5) - 1
            # tf.image.resize_images(BILINEAR, align_corners=False): TF1's, no half-pixel
            # centres (lines 353-357).
            ("preprocessing.resize_method", "bilinear_tf1", NVCNN, 353),
            ("preprocessing.flip", True, NVCNN, 408),  # random_flip_left_right
            # tf.clip_by_value(images, 0., 255.); tf.cast(images, self.dtype), uint8 (l. 386)
            ("preprocessing.quantize_uint8", True, NVCNN, 444),
            ("preprocessing.dct_method", "INTEGER_FAST", NVCNN, 332),
            ("preprocessing.fancy_upscaling", False, NVCNN, 331),
            ("eval.images", 50000, NVCNN, 1172),
            ("eval.drop_remainder", True, NVCNN, 1364),  # nstep = nrecord // batch_size
        ],
    ),
    "ssd320_v1.2": (
        DLE_COMMIT,
        [
            ("run.batch_per_gpu", 32, SSD_CFG, 150),
            ("run.reference_gpus", 8, SSD_DIR + "examples/SSD320_FP16_8GPU.sh", 17),
            ("run.precision", "fp16", SSD_DIR + "examples/SSD320_FP16_8GPU.sh", 40),
            ("run.images", 12500 * 8 * 32, SSD_CFG, 150),  # num_steps 12500 (line 154)
            ("optimizer.name", "sgd", SSD_CFG, 170),
            ("optimizer.momentum", 0.9, SSD_CFG, 179),
            ("optimizer.nesterov", False, SSD_CFG, 170),
            ("optimizer.weight_decay", 0.0, SSD_CFG, 169),  # L2 is a regularizer (line 71)
            ("schedule.base_lr", 0.16, SSD_CFG, 173),
            ("schedule.reference_batch", 256, SSD_CFG, 150),
            # The 1-GPU config: learning_rate_base 0.02 = 0.16 x 32 / 256.
            ("schedule.scaling", "linear", SSD_DIR + "configs/ssd320_full_1gpus.config", 173),
            ("schedule.decay", "cosine", SSD_CFG, 172),
            ("schedule.decay_from", "warmup_end", SSD_OD + "utils/learning_schedules.py", 100),
            ("schedule.warmup_start_factor", 0.43332, SSD_CFG, 175),  # 0.0693312 / 0.16
            ("schedule.warmup_fraction", 0.08, SSD_CFG, 174),  # 1000 / 12500
            ("schedule.end_factor", 0.0, SSD_OD + "utils/learning_schedules.py", 100),
            ("loss.dynamic_loss_scale", True, SSD_OD + "model_main.py", 114),
            ("loss.label_smoothing", 0.0, SSD_CFG, 120),
            ("loss.mixup_alpha", 0.0, SSD_CFG, 155),
            ("detection.backbone", "resnet50_v1", SSD_CFG, 91),
            ("detection.backbone_weights", "tf-slim resnet_v1_50_2016_08_28", SSD_CFG, 148),
            ("detection.freeze_batchnorm", True, SSD_CFG, 23),
            ("detection.image_size", 320, SSD_CFG, 58),
            ("detection.num_classes", 90, SSD_CFG, 24),
            ("detection.flip", True, SSD_CFG, 156),
            ("detection.crop_aspect_range", (0.75, 3.0), SSD_CFG, 162),
            ("detection.crop_area_range", (0.75, 1.0), SSD_CFG, 164),
            ("detection.crop_min_object_covered", 0.0, SSD_CFG, 161),
            ("detection.color_jitter", False, SSD_CFG, 155),  # flip and crop only
            ("detection.max_boxes", 100, SSD_CFG, 183),
            ("detection.score_threshold", 1e-8, SSD_CFG, 137),
            ("detection.iou_threshold", 0.6, SSD_CFG, 138),
            ("detection.max_per_class", 100, SSD_CFG, 139),
            ("detection.max_total", 100, SSD_CFG, 140),
            ("detection.l2_weight", 4e-4, SSD_CFG, 69),
            ("detection.activation", "relu6", SSD_CFG, 68),
            (
                "detection.backbone_activation",
                "relu6 in the blocks, relu after each residual add",
                SSD_OD + "models/ssd_resnet_v1_fpn_feature_extractor.py",
                165,
            ),
            (
                "detection.channel_means",
                (123.68, 116.779, 103.939),
                SSD_OD + "models/ssd_resnet_v1_fpn_feature_extractor.py",
                128,
            ),
            ("detection.box_coder_scales", (10.0, 10.0, 5.0, 5.0), SSD_CFG, 27),
            ("detection.focal_alpha", 0.25, SSD_CFG, 122),
            ("detection.focal_gamma", 2.0, SSD_CFG, 123),
            ("detection.class_bias_init", -4.6, SSD_CFG, 66),
            ("detection.head_bn_momentum", 0.997, SSD_CFG, 82),
            ("detection.head_bn_epsilon", 0.001, SSD_CFG, 83),
        ],
    ),
}

#: Deliberate differences: knob -> our value (the reference's is in REFERENCES).
DEVIATIONS = {
    "resnet50_v1.5_90e": {"model.num_classes": 1000, "eval.drop_remainder": False},
    "resnet50_v1.5_250e": {"model.num_classes": 1000, "eval.drop_remainder": False},
    "inception_v3_nvcnn": {"schedule.scaling": "linear", "eval.drop_remainder": False},
    "ssd320_v1.2": {
        "detection.backbone_weights": "imagenet",
        "detection.backbone_activation": "relu",
    },
}


def _rows(name: str) -> list[pytest.param]:
    commit, rows = REFERENCES[name]
    return [pytest.param(name, commit, *row, id=f"{name}:{row[0]}") for row in rows]


def test_every_recipe_has_a_reference_table():
    # The cvbench defaults of the other ResNet depths are resnet50_v1.5_90e's rows with their
    # deviations (tests/tasks/test_recipe_defaults.py).
    references = [name for name in list_recipes() if not name.endswith("_cvbench")]
    assert sorted(REFERENCES) == references


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_every_sourced_knob_has_a_reference_row(name):
    # Every knob off its part's default has a source (Recipe refuses it otherwise), and
    # every source has its row here.
    recipe = get_recipe(name)
    assert {row[0] for row in REFERENCES[name][1]} == set(recipe.sources)
    assert {d.knob for d in recipe.deviations} == set(DEVIATIONS[name])


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    ("name", "commit", "knob", "reference", "path", "line"),
    [p for name in sorted(REFERENCES) for p in _rows(name)],
)
def test_knob_matches_reference(name, commit, knob, reference, path, line):
    recipe = get_recipe(name)
    source = recipe.sources[knob]
    assert (source.repo, source.path, source.line, source.commit) == (DLE, path, line, commit)
    assert recipe.reference_value(knob) == reference
    assert type(recipe.reference_value(knob)) is type(reference)
    ours = DEVIATIONS[name].get(knob, reference)
    assert recipe.value(knob) == ours
    assert (recipe.deviation(knob) is None) == (knob not in DEVIATIONS[name])


# The run each reference configuration writes down, by GPU count: SSD's three configs
# (configs/ssd320_full_{1,4,8}gpus.config lines 150, 154, 173, 175, 176) and DLE's
# DGX1 90-epoch run (625 steps per epoch: 1,281,167 // 2,048; runner_utils.py:32).
PLANS = [
    # name, GPUs, train images, (global batch, peak LR, total steps, warmup steps, start LR)
    ("ssd320_v1.2", 1, 118287, (32, 0.02, 100000, 8000, 0.0086664)),
    ("ssd320_v1.2", 4, 118287, (128, 0.08, 25000, 2000, 0.0346656)),
    ("ssd320_v1.2", 8, 118287, (256, 0.16, 12500, 1000, 0.0693312)),
    # 0.256 x 2048 / 256 = 2.048; 625 x 90 = 56,250 steps; int(625 x 8) = 5,000 warmup.
    ("resnet50_v1.5_90e", 8, 1281167, (2048, 2.048, 56250, 5000, 0.0)),
    # 250 epochs: 625 x 250 = 156,250 steps, the same 5,000 warmup steps.
    ("resnet50_v1.5_250e", 8, 1281167, (2048, 2.048, 156250, 5000, 0.0)),
    # nvcnn: nstep_per_epoch = 1,281,167 // 1,024 = 1,251; x 90 = 112,590; LR 1.0 at 8 x 128.
    ("inception_v3_nvcnn", 8, 1281167, (1024, 1.0, 112590, 0, 0.0)),
]


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(("name", "gpus", "images", "expected"), PLANS)
def test_plan_matches_reference_configs(name, gpus, images, expected):
    from cvbench.tasks.recipes import plan

    run = plan(get_recipe(name), num_gpus=gpus, train_images=images)
    got = (run.global_batch, run.peak_lr, run.total_steps, run.warmup_steps, run.warmup_start_lr)
    assert got[0] == expected[0] and got[2:4] == expected[2:4]
    assert got[1] == pytest.approx(expected[1], rel=1e-12)
    assert got[4] == pytest.approx(expected[4], rel=1e-12)


# The reference's formula at the steps that tell schedules apart: 0, the last warmup step,
# the end of the warmup, mid-run and the end.
LEARNING_RATES = [
    # DLE (learning_rate.py:48-62) at 8 x 256: warmup 2.048 x step / 5000, then
    # cosine_decay(2.048, step, 56250) = 2.048 x (1 + cos(pi step / 56250)) / 2 from step 0.
    ("resnet50_v1.5_90e", 0, 0.0),
    ("resnet50_v1.5_90e", 4999, 2.048 * 4999 / 5000),  # 2.0475904
    # At the end of the warmup DLE's cosine has already run 5000 of 56250 steps:
    # 1.024 x (1 + cos(pi 5000 / 56250)) = 2.00833..., not the peak 2.048.
    ("resnet50_v1.5_90e", 5000, 2.0083319766408385),
    # Mid-run: cos(pi / 2) = 0 -> 1.024 (a cosine started after the warmup gives 1.1803,
    # 15% higher: 1.024 x (1 + cos(pi 23125 / 51250))).
    ("resnet50_v1.5_90e", 28125, 1.024),
    ("resnet50_v1.5_90e", 56250, 0.0),
    # OD (learning_schedules.py:100-115) at 8 x 32: 0.0693312 + (0.16 - 0.0693312) step / 1000,
    # then 0.08 x (1 + cos(pi (step - 1000) / 11500)).
    ("ssd320_v1.2", 0, 0.0693312),
    ("ssd320_v1.2", 500, 0.1146656),
    ("ssd320_v1.2", 1000, 0.16),
    ("ssd320_v1.2", 6750, 0.08),  # (6750 - 1000) / 11500 = 1/2
    ("ssd320_v1.2", 12500, 0.0),
    # nvcnn (nvcnn_hvd.py:473-479): polynomial_decay(1.0, step, 112590, 0, power=2).
    ("inception_v3_nvcnn", 0, 1.0),
    ("inception_v3_nvcnn", 56295, 0.25),  # (1 - 1/2) ** 2
    ("inception_v3_nvcnn", 112590, 0.0),
]


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(("name", "step", "expected"), LEARNING_RATES)
def test_reference_learning_rate(name, step, expected):
    from cvbench.tasks.recipes import plan, reference_learning_rate

    recipe = get_recipe(name)
    run = plan(recipe, num_gpus=8, train_images=1281167 if recipe.task != "detection" else 118287)
    assert reference_learning_rate(recipe, step, run) == pytest.approx(expected, abs=1e-12)
