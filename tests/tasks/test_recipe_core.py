"""The recipe objects (validation, knob access, overrides) and their conversions for each
consumer, checked against the consumers' real signatures and cvbench's own constants."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import inspect

import pytest

from cvbench.tasks.recipes import (
    default_recipe,
    get_recipe,
    list_recipes,
    loss_kwargs,
    mixup_kwargs,
    model_kwargs,
    optimizer_config,
    plan,
    preprocessing_kwargs,
    schedule_kwargs,
    train_config_kwargs,
)
from cvbench.tasks.recipes.core import Deviation, Source

# Names a consumer may lack (each test below accepts only these extra names): none since the
# model / training / data knobs of issue #13 are merged, so the tests demand the real signatures.
PENDING_MODEL: set[str] = set()
PENDING_SCHEDULE: set[str] = set()
PENDING_TRAIN: set[str] = set()
PENDING_LOSS: set[str] = set()
IMAGE_PREPROCESSING_FIELDS = {
    "aspect_ratio_range",
    "area_range",
    "min_object_covered",
    "max_attempts",
    "eval_crop",
    "crop_fraction",
    "input_scaling",
    "mean",
    "std",
    "resize_method",
    "dct_method",
    "fancy_upscaling",
}

pytestmark = pytest.mark.backend_agnostic


def _parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def test_list_and_get():
    assert list_recipes() == [
        "inception_v3_nvcnn",
        "resnet50_v1.5_250e",
        "resnet50_v1.5_90e",
        "ssd320_v1.2",
    ]
    assert get_recipe("ssd320_v1.2").model == "ssd320"
    with pytest.raises(ValueError, match=r"unknown recipe 'resnet50'; known: inception_v3_nvcnn"):
        get_recipe("resnet50")


def test_default_recipe_of_each_model():
    assert default_recipe("resnet50").name == "resnet50_v1.5_90e"
    assert default_recipe("inception_v3").name == "inception_v3_nvcnn"
    assert default_recipe("ssd320").name == "ssd320_v1.2"
    assert default_recipe("resnet18") is None  # no published recipe: the task's defaults


@pytest.mark.parametrize("name", list_recipes())
def test_default_recipe_is_the_recipe_of_its_model(name):
    recipe = get_recipe(name)
    assert default_recipe(recipe.model).model == recipe.model


def test_a_set_knob_without_source_is_refused():
    recipe = get_recipe("resnet50_v1.5_90e")
    sources = dict(recipe.sources)
    del sources["loss.loss_scale"]
    with pytest.raises(ValueError, match="no source for loss.loss_scale"):
        dataclasses.replace(recipe, sources=sources)


def test_a_source_for_no_knob_is_refused():
    recipe = get_recipe("resnet50_v1.5_90e")
    sources = {**recipe.sources, "loss.typo": recipe.sources["loss.loss_scale"]}
    with pytest.raises(ValueError, match="loss.typo"):
        dataclasses.replace(recipe, sources=sources)
    with pytest.raises(ValueError, match="schedule.nope"):
        dataclasses.replace(recipe, deviations=(Deviation("schedule.nope", 1, "x"),))


def test_parts_must_fit_the_task():
    recipe = get_recipe("ssd320_v1.2")
    with pytest.raises(ValueError, match="classification needs model_knobs"):
        dataclasses.replace(recipe, task="classification")
    with pytest.raises(ValueError, match="Recipe.task must be"):
        dataclasses.replace(recipe, task="segmentation")


def test_source_lines():
    source = Source("o/r", "a.py", 89, "0" * 40, last=101, note="n")
    assert (source.lines, str(source)) == ("89-101", "o/r a.py:89-101 (n)")
    with pytest.raises(ValueError, match="line must be an int >= 1, got 0"):
        Source("o/r", "a.py", 0, "0" * 40)
    with pytest.raises(ValueError, match="last must be an int >= line 5, got 4"):
        Source("o/r", "a.py", 5, "0" * 40, last=4)


def test_recipes_are_frozen():
    recipe = get_recipe("resnet50_v1.5_90e")
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.run.batch_per_gpu = 128
    with pytest.raises(TypeError):
        recipe.sources["run.epochs"] = None


def test_unknown_knob_names_the_knobs():
    with pytest.raises(ValueError, match="has no knob 'run.batch'; knobs: run.batch_per_gpu"):
        get_recipe("resnet50_v1.5_90e").value("run.batch")


def test_override_records_the_reference():
    recipe = get_recipe("resnet50_v1.5_90e")
    changed = recipe.override({"run.batch_per_gpu": 128, "loss.mixup_alpha": 0.2}, reason="flags")
    assert changed.value("run.batch_per_gpu") == 128
    assert changed.reference_value("run.batch_per_gpu") == 256
    assert changed.deviation("loss.mixup_alpha") == Deviation("loss.mixup_alpha", 0.0, "flags")
    assert recipe.value("run.batch_per_gpu") == 256  # the registered recipe is unchanged
    # Setting a knob back to the reference drops its deviation; the built-in ones stay.
    back = changed.override({"run.batch_per_gpu": 256}, reason="flags")
    assert back.deviation("run.batch_per_gpu") is None
    assert back.deviation("eval.drop_remainder") is not None
    # Overriding a deviating knob to the reference's value removes that deviation too.
    same = recipe.override({"eval.drop_remainder": True}, reason="--dle-eval")
    assert same.deviation("eval.drop_remainder") is None


def test_override_of_an_unset_knob_needs_no_source():
    recipe = get_recipe("ssd320_v1.2").override({"loss.loss_scale": 128.0}, reason="--loss-scale")
    assert recipe.deviation("loss.loss_scale").reference is None
    with pytest.raises(ValueError, match="has no knob 'model.bn_momentum'"):
        get_recipe("ssd320_v1.2").override({"model.bn_momentum": 0.9}, reason="x")


def test_optimizer_config_resnet_decays_the_fc_bias():
    config = optimizer_config(get_recipe("resnet50_v1.5_90e"))
    assert (config.name, config.momentum, config.weight_decay) == ("sgd", 0.875, 3.0517578125e-05)
    assert (config.decay_bias, config.decay_batchnorm, config.nesterov) == (True, False, False)


def test_optimizer_config_inception_is_larc_on_every_variable():
    config = optimizer_config(get_recipe("inception_v3_nvcnn"))
    assert (config.name, config.larc_eta, config.larc_mode, config.larc_epsilon) == (
        "lars",
        0.003,
        "clip",
        1.0,
    )
    assert (config.nesterov, config.decay_bias, config.decay_batchnorm) == (True, True, True)


def test_schedule_kwargs_fit_schedule_config():
    from cvbench.training.config import ScheduleConfig

    fields = {f.name for f in dataclasses.fields(ScheduleConfig)}
    for name in list_recipes():
        recipe = get_recipe(name)
        kwargs = schedule_kwargs(recipe, plan(recipe, num_gpus=8, train_images=1281167))
        assert set(kwargs) <= fields | PENDING_SCHEDULE, name
        known = {k: v for k, v in kwargs.items() if k in fields}
        ScheduleConfig(**known)  # valid values


def test_schedule_kwargs_unscaled_recipe_keeps_its_rate_at_any_batch():
    recipe = get_recipe("inception_v3_nvcnn").override({"schedule.scaling": "none"}, reason="x")
    run = plan(recipe, num_gpus=2, train_images=1281167)  # global 256
    kwargs = schedule_kwargs(recipe, run)
    # The Trainer's peak is base_lr x global / reference_batch = 1.0 x 256 / 256.
    assert (kwargs["base_lr"], kwargs["reference_batch"], run.peak_lr) == (1.0, 256, 1.0)


def test_schedule_kwargs_resnet():
    recipe = get_recipe("resnet50_v1.5_90e")
    kwargs = schedule_kwargs(recipe, plan(recipe, num_gpus=8, train_images=1281167))
    assert kwargs == {
        "base_lr": 0.256,
        "reference_batch": 256,
        "warmup_steps": 5000,  # int(625 steps per epoch x 8 epochs)
        "warmup_start_factor": 0.0,
        "decay": "cosine",
        "decay_from": "start",
        "end_factor": 0.0,
    }


def test_train_config_kwargs():
    from cvbench.training.config import TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    static = train_config_kwargs(get_recipe("resnet50_v1.5_90e"))
    assert static == {"dynamic_loss_scale": False, "loss_scale": 128.0}
    assert train_config_kwargs(get_recipe("ssd320_v1.2")) == {"dynamic_loss_scale": True}
    assert set(static) <= fields | PENDING_TRAIN


def test_loss_and_mixup_kwargs():
    from cvbench.training.losses import SparseCrossEntropy

    kwargs = loss_kwargs(get_recipe("resnet50_v1.5_90e"))
    assert kwargs == {"label_smoothing": 0.1, "smoothing_classes": 1001}
    assert set(kwargs) <= _parameters(SparseCrossEntropy.__init__) | PENDING_LOSS
    assert loss_kwargs(get_recipe("inception_v3_nvcnn")) == {
        "label_smoothing": 0.0,
        "smoothing_classes": None,
    }
    assert mixup_kwargs(get_recipe("resnet50_v1.5_250e")) == {"alpha": 0.2}
    assert mixup_kwargs(get_recipe("resnet50_v1.5_90e")) is None


@pytest.mark.parametrize("name", ["resnet50_v1.5_90e", "inception_v3_nvcnn"])
def test_model_kwargs_fit_the_builder(name):
    from cvbench.zoo import MODELS

    recipe = get_recipe(name)
    kwargs = model_kwargs(recipe)
    builder = MODELS.get(recipe.model)
    assert set(kwargs) <= _parameters(builder) | PENDING_MODEL
    assert kwargs["weights"] is None and kwargs["num_classes"] == 1000


def test_model_kwargs_ssd_fit_ssd320():
    from cvbench.detection.ssd import ssd320

    kwargs = model_kwargs(get_recipe("ssd320_v1.2"))
    assert set(kwargs) <= _parameters(ssd320)
    assert (kwargs["backbone_weights"], kwargs["freeze_batchnorm"]) == ("imagenet", True)
    assert kwargs["weight_decay"] == inspect.signature(ssd320).parameters["weight_decay"].default


def test_preprocessing_kwargs():
    resnet = preprocessing_kwargs(get_recipe("resnet50_v1.5_90e"))
    inception = preprocessing_kwargs(get_recipe("inception_v3_nvcnn"))
    assert set(resnet) == IMAGE_PREPROCESSING_FIELDS
    assert set(inception) == IMAGE_PREPROCESSING_FIELDS - {"mean", "std"} | {
        "flip",
        "quantize_uint8",
    }
    assert (inception["input_scaling"], inception["eval_crop"]) == ("inception", "crop_then_resize")


def test_the_nvcnn_recipe_is_the_data_packages_nvcnn_preprocessing():
    # Two readings of nvcnn_hvd.py (the recipe's knobs and the data package's own
    # `ImagePreprocessing.nvcnn_inception_v3()`) must give the same pipeline: TF1 bilinear
    # resize, flip after it, uint8 quantization, inception scaling, central_crop then resize.
    from cvbench.data.image_preprocessing import ImagePreprocessing

    kwargs = preprocessing_kwargs(get_recipe("inception_v3_nvcnn"))
    assert ImagePreprocessing(**kwargs) == ImagePreprocessing.nvcnn_inception_v3()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_gpus": 0, "train_images": 10}, "num_gpus must be an int >= 1, got 0"),
        ({"num_gpus": 1, "train_images": 0}, "train_images must be an int >= 1, got 0"),
        ({"num_gpus": 8, "train_images": 2047}, "global batch 2048 is larger than the 2047"),
    ],
)
def test_plan_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan(get_recipe("resnet50_v1.5_90e"), **kwargs)


def test_plan_describe_and_batch_override():
    run = plan(get_recipe("resnet50_v1.5_90e"), num_gpus=1, train_images=1281167, batch_per_gpu=128)
    # 1,281,167 // 128 = 10,009 steps per epoch; LR 0.256 x 128 / 256 = 0.128.
    assert run.describe() == (
        "global batch 128 = 1 x 128, peak LR 0.128, 10009 steps per epoch, 900810 steps, "
        "warmup 80072 steps from 0"
    )


@pytest.mark.parametrize("module", ["cvbench.tasks.recipes", "cvbench.cli.recipes"])
def test_docstring_examples(module):
    outcome = doctest.testmod(importlib.import_module(module))
    assert outcome.attempted > 0
    assert outcome.failed == 0
