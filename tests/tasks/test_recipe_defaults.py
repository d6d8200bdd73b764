"""Every model's defaults are a registered recipe, and `cvbench train`, `cvbench benchmark`
and `prepare_run` resolve a model to the same recipe and build the same optimizer, schedule,
loss, loss scaling, preprocessing and builder arguments from it."""

from __future__ import annotations

import dataclasses
import inspect

import keras
import pytest

import cvbench.cli as cli
from cvbench.cli.task_args import task_from_args
from cvbench.data import ImagePreprocessing
from cvbench.tasks import TaskOptions, make_task, prepare_run
from cvbench.tasks import classification as classification_module
from cvbench.tasks import detection as detection_module
from cvbench.tasks.recipes import default_recipe, get_recipe
from cvbench.tasks.recipes.resnet_depths import BUILDER_BN_EPSILON, DEPTHS
from cvbench.training import OptimizerConfig, ScheduleConfig, TrainConfig
from cvbench.zoo import list_models

QUIET = TrainConfig(log_every=0, progress_bar=False, export=False)
#: Small enough for every model; the same on each path (flags, or Python settings).
TINY = {"image_size": 64, "batch_size": 2, "num_classes": 3, "precision": "fp32"}
TINY_FLAGS = ["--image-size", "64", "--batch-size", "2", "--num-classes", "3"]
TINY_FLAGS += ["--precision", "fp32", "--synthetic"]


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("depth", DEPTHS)
def test_the_other_depths_keep_the_defaults_cvbench_trained_them_with(depth):
    # Before the recipes, these depths trained with the task's built-in defaults; their
    # recipe must give exactly those (behaviour unchanged).
    from cvbench.models import resnet

    recipe = default_recipe(f"resnet{depth}")
    assert recipe.name == f"resnet{depth}_cvbench" and recipe.model == f"resnet{depth}"
    assert recipe.optimizer == OptimizerConfig(
        name="sgd", momentum=0.875, weight_decay=3.0517578125e-05
    )
    assert recipe.schedule == ScheduleConfig(base_lr=0.256, warmup_epochs=8, decay="cosine")
    assert (recipe.loss.label_smoothing, recipe.loss.smoothing_classes) == (0.1, None)
    assert (recipe.loss.dynamic_loss_scale, recipe.loss.loss_scale, recipe.loss.mixup_alpha) == (
        True, None, 0.0)  # fmt: skip
    assert recipe.preprocessing == ImagePreprocessing()
    assert (recipe.run.batch_per_gpu, recipe.run.epochs) == (256, 90)  # the CLI's old defaults
    # The builder's own defaults (the model it built without a recipe).
    defaults = inspect.signature(resnet.build_resnet).parameters
    model = recipe.model_knobs
    assert BUILDER_BN_EPSILON == resnet.BN_EPSILON
    for name in ("bn_momentum", "bn_epsilon", "bn_scale", "conv_initializer", "dense_initializer"):
        assert getattr(model, name) == defaults[name].default, name
    assert (model.image_size, model.num_classes, model.weights) == (224, 1000, None)
    # Each difference from resnet50_v1.5_90e is a recorded deviation with DLE's value.
    reference = get_recipe("resnet50_v1.5_90e")
    for knob, value in recipe.knobs():
        if value != reference.value(knob):
            assert recipe.deviation(knob) is not None, knob
            assert recipe.reference_value(knob) == reference.reference_value(knob), knob


@pytest.fixture
def built(monkeypatch):
    """`get_model` of the tasks replaced: records `(name, kwargs)` and returns a tiny model
    (the comparison is of what each path asks the builder for)."""
    calls = []

    def fake_get_model(name, **kwargs):
        calls.append((name, kwargs))
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])

    monkeypatch.setattr(classification_module, "get_model", fake_get_model)
    monkeypatch.setattr(detection_module, "get_model", fake_get_model)
    return calls


def _trainer_settings(trainer):
    loss = trainer.training_model.loss_fn
    loss_config = loss.get_config() if hasattr(loss, "get_config") else type(loss).__name__
    return {
        "optimizer": trainer._optimizer_spec,
        "schedule": dataclasses.replace(trainer._schedule_spec, warmup_steps=None),
        "loss": (type(loss).__name__, loss_config),
        "loss_scaling": (trainer.config.dynamic_loss_scale, trainer.config.loss_scale),
    }


def _args(command, argv):
    return cli.build_parser().parse_args([command, *argv])


@pytest.mark.parametrize("model", list_models())
def test_train_benchmark_and_prepare_run_build_the_same_run(model, built, monkeypatch):
    from cvbench.benchmark.workloads import cvbench_model, make_trainer

    weights = ["--backbone-weights", "b.h5"] if model == "ssd320" else []
    settings = {**TINY, **({"backbone_weights": "b.h5"} if weights else {})}
    train = task_from_args(_args("train", ["--model", model, *TINY_FLAGS, *weights]))
    bench = task_from_args(_args("benchmark", ["--model", model, *TINY_FLAGS]))
    python = make_task(TaskOptions(model=model, settings=settings))
    assert train.recipe.name == default_recipe(model).name
    # One resolution: the same recipe, knob for knob (the deviations' reasons name the flags
    # on the command line, the settings in Python; benchmark: no backbone file, which it
    # never loads).
    assert dict(train.recipe.knobs()) == dict(python.recipe.knobs())
    assert {d.knob for d in train.recipe.deviations} == {d.knob for d in python.recipe.deviations}
    if weights:
        bench_recipe = bench.recipe.with_overrides(
            {"detection.backbone_weights": "b.h5"}, reason="--backbone-weights"
        )
        assert dict(bench_recipe.knobs()) == dict(train.recipe.knobs())
    else:
        assert bench.recipe == train.recipe  # the same flags, the same reasons
    for task in (train, bench):
        assert task.image_size == python.image_size == 64
        if hasattr(task, "preprocessing"):  # classifiers: the recipe's pipeline
            assert task.preprocessing() == python.preprocessing() == python.recipe.preprocessing
    runs = [prepare_run(t, precision="fp32", config=QUIET) for t in (train, python)]
    bench_trainer = make_trainer(cvbench_model(bench), precision="fp32")
    settings_of = [_trainer_settings(r.trainer) for r in runs] + [_trainer_settings(bench_trainer)]
    assert settings_of[0] == settings_of[1] == settings_of[2]
    assert settings_of[0]["optimizer"] == train.recipe.optimizer
    assert settings_of[0]["schedule"] == train.recipe.schedule
    # The builder got the same arguments on every path (the backbone file apart).
    assert {name for name, _ in built} == {model} and len(built) == 3
    arguments = [
        {k: v for k, v in kwargs.items() if k != "backbone_weights"} for _, kwargs in built
    ]
    assert arguments[0] == arguments[1] == arguments[2]
