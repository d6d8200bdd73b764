"""The tasks and `prepare_run` with a recipe (`TaskOptions(recipe=...)`): the Python path that
`cvbench train --recipe` takes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from cvbench.tasks import ClassificationTask, DetectionTask, TaskOptions, prepare_run
from cvbench.tasks.recipes import RecipePlan, fit_lengths, get_recipe, plan
from cvbench.training import TrainConfig

QUIET = TrainConfig(log_every=0, progress_bar=False, export=False)


def test_options_resolve_the_name_and_refuse_another_model():
    options = TaskOptions(model="resnet50", recipe="resnet50_v1.5_90e")
    assert options.recipe is get_recipe("resnet50_v1.5_90e")
    with pytest.raises(ValueError, match="recipe 'ssd320_v1.2' trains ssd320, not resnet50"):
        TaskOptions(model="resnet50", recipe="ssd320_v1.2")
    with pytest.raises(ValueError, match="unknown recipe 'nope'"):
        TaskOptions(model="resnet50", recipe="nope")
    smoothed = TaskOptions(model="resnet50", recipe="resnet50_v1.5_90e", label_smoothing=0.3)
    assert smoothed.recipe.loss.label_smoothing == 0.3
    assert smoothed.recipe.deviation("loss.label_smoothing").reason == "label_smoothing"


def test_classification_task_takes_size_loss_and_pipeline_from_the_recipe():
    task = ClassificationTask(TaskOptions(model="inception_v3", recipe="inception_v3_nvcnn"))
    assert (task.image_size, task.num_classes) == (299, 1000)
    loss = task.loss()
    assert (loss.label_smoothing, loss.smoothing_classes) == (0.0, None)
    preprocessing = task.train_options()["preprocessing"]
    assert (preprocessing.input_scaling, preprocessing.eval_crop) == (
        "inception",
        "crop_then_resize",
    )
    assert (preprocessing.aspect_ratio_range, preprocessing.area_range) == ((0.8, 1.25), (0.1, 1.0))
    # x / 127.5 - 1 is (x - 127.5) / 127.5: the exported model and `cvbench eval` use it.
    assert task.input_normalization() == ((127.5,) * 3, (127.5,) * 3)
    # its model files state the rule its evaluation pipeline follows (not center_crop)
    assert (task.model_info().resize, task.model_info().crop_fraction) == (
        "crop_then_resize",
        0.875,
    )
    resnet = ClassificationTask(TaskOptions(model="resnet50", recipe="resnet50_v1.5_90e"))
    assert resnet.input_normalization() == ((123.68, 116.28, 103.53), (58.395, 57.12, 57.385))
    from cvbench.data import ImagePreprocessing

    plain = ClassificationTask(TaskOptions(model="resnet18"))  # resnet18_cvbench
    assert plain.train_options()["preprocessing"] == ImagePreprocessing()
    assert plain.input_normalization() == (ImagePreprocessing().mean, ImagePreprocessing().std)


def test_mixup_only_with_the_recipe_that_has_it():
    import tensorflow as tf

    images = tf.zeros([4, 8, 8, 3])
    batches = tf.data.Dataset.from_tensors((images, tf.constant([0, 1, 2, 3])))
    rank0 = SimpleNamespace(rank=0)
    mixed = ClassificationTask(TaskOptions(model="resnet50", recipe="resnet50_v1.5_250e"))
    _, labels = next(iter(mixed.train_dataset(batches, seed=1, distribution=rank0)))
    assert labels.shape == (4, 1000)  # soft labels over the model's 1000 classes
    np.testing.assert_allclose(labels.numpy().sum(axis=1), 1.0, rtol=1e-6)
    plain = ClassificationTask(TaskOptions(model="resnet50", recipe="resnet50_v1.5_90e"))
    assert plain.train_dataset(batches, seed=1, distribution=rank0) is batches
    # The metrics score soft labels by their dominant class, integer labels as they are.
    # Logits: 10 on the row's class, then classes 0, 1, 2, ... in that order (no ties), so the
    # top 5 of the row of class 2 are {2, 0, 1, 3, 4}.
    classes = [0, 1, 2, 3]
    logits = (np.eye(1000)[classes] * 10 - np.arange(1000) * 1e-3).astype(np.float32)
    soft = (np.eye(1000)[[0, 1, 9, 9]] * 0.8 + np.eye(1000)[[5, 5, 2, 3]] * 0.2).astype("f4")
    top1, top5 = mixed.metrics()
    for metric in (top1, top5):
        metric.update_state(soft, logits)  # dominant 0, 1, 9, 9: top-1 2/4, top-5 2/4
        metric.update_state(np.array([0, 1, 4, 7]), logits)  # top-1 2/4, top-5 3/4 (4 in row 2)
    assert (float(top1.result()), float(top5.result())) == (0.5, 0.625)
    assert [m.name for m in plain.metrics()] == ["top1", "top5"]


def test_prepare_run_follows_the_recipe():
    recipe = get_recipe("resnet50_v1.5_90e").with_overrides(
        {"model.image_size": 32, "run.batch_per_gpu": 2, "run.epochs": 3}, reason="tiny"
    )
    task = ClassificationTask(TaskOptions(model="resnet50", recipe=recipe, synthetic_steps=4))
    run = prepare_run(task, precision="fp32", config=QUIET)
    # 4 steps of 1 x 2; 3 epochs = 12 steps; warmup int(4 x 8) = 32 > 12: capped at 12 // 2
    # = 6; peak 0.256 x 2 / 256.
    assert run.plan == RecipePlan(1, 2, 2, 0.002, 4, 12, 6, 0.0, "0.256 x 2 / 256", 32)
    assert run.batch_size == 2 and run.train.steps_per_epoch == 4
    config, schedule = run.trainer.config, run.trainer._schedule_spec
    assert (config.dynamic_loss_scale, config.loss_scale, config.log_every) == (False, 128.0, 0)
    assert (schedule.warmup_steps, schedule.decay_from, schedule.base_lr) == (6, "start", 0.256)
    assert run.trainer._optimizer_spec.decay_bias is True


def test_ssd_with_frozen_batch_norms_and_no_backbone_weights_is_refused():
    options = TaskOptions(model="ssd320", image_size=64, num_classes=3, synthetic_steps=1)
    with pytest.raises(ValueError, match="freezes every batch norm.*--backbone-weights imagenet"):
        prepare_run(DetectionTask(options), batch_size=2, precision="fp32", config=QUIET)
    recipe = get_recipe("ssd320_v1.2").with_overrides(
        {"detection.backbone_weights": None}, reason="test"
    )
    task = DetectionTask(TaskOptions(model="ssd320", recipe=recipe, image_size=64))
    with pytest.raises(ValueError, match="random ResNet-50 backbone"):
        task.check_trainable()
    unfrozen = recipe.with_overrides({"detection.freeze_batchnorm": False}, reason="test")
    DetectionTask(TaskOptions(model="ssd320", recipe=unfrozen)).check_trainable()
    # A builder of its own (the demo's small SSD) chooses for itself.
    DetectionTask(options, build=lambda classes, size: None).check_trainable()
    # The recipe's size, classes and backbone file reach the builder's arguments.
    named = DetectionTask(TaskOptions(model="ssd320", recipe="ssd320_v1.2"), backbone_weights="b")
    kwargs = named.model_kwargs()
    assert (kwargs["image_size"], kwargs["num_classes"], kwargs["backbone_weights"]) == (
        320, 90, "b")  # fmt: skip
    assert (kwargs["freeze_batchnorm"], kwargs["weight_decay"]) == (True, 4e-4)


@pytest.mark.parametrize(
    ("total", "steps", "expected"),
    [
        (12500, 458, (50, 250)),  # SSD320 v1.2 at 8 x 32 on COCO 2017's 117,266 images
        (56250, 625, (90, 625)),  # ResNet-50 90 epochs at 8 x 256: its own epochs
        (100000, 3664, (32, 3125)),  # SSD320 on 1 GPU
        (7, 3, (7, 1)),  # a prime total: one-step epochs
        (4, 10, (1, 4)),  # fewer steps than the data has: one epoch of all of them
    ],
)
def test_fit_lengths_train_exactly_the_total(total, steps, expected):
    run = RecipePlan(1, 1, 1, 0.1, steps, total, 0, 0.0)
    assert fit_lengths(run) == expected
    assert expected[0] * expected[1] == total


def test_plan_of_an_ssd_run_given_in_epochs_keeps_the_warmup_fraction():
    recipe = get_recipe("ssd320_v1.2").with_overrides(
        {"run.epochs": 2, "run.images": None}, reason="--epochs"
    )
    run = plan(recipe, num_gpus=1, train_images=100, batch_per_gpu=2)
    # 50 steps per epoch x 2 = 100 steps; warmup round(0.08 x 100) = 8.
    assert (run.steps_per_epoch, run.total_steps, run.warmup_steps) == (50, 100, 8)


def test_data_classes_replace_the_recipes():
    from cvbench.tasks.recipes import fit_classes

    recipe = get_recipe("resnet50_v1.5_90e")
    fitted = fit_classes(recipe, 10, reason="the classes of the data")
    # DLE smooths over 1001 classes for its 1000; 10 classes smooth over their own 10.
    assert (fitted.model_knobs.num_classes, fitted.loss.smoothing_classes) == (10, None)
    assert fitted.deviation("model.num_classes").reason == "the classes of the data"
    assert fit_classes(recipe, 1000, reason="x") is recipe
