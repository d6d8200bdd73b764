"""The recipe objects (validation, knob access, overrides), the consumers' own objects they
hold, and the builder arguments, checked against the consumers' real signatures."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import inspect

import pytest

from cvbench.tasks.recipes import default_recipe, get_recipe, list_recipes, plan
from cvbench.tasks.recipes.core import Deviation, OwnDefault, Source
from cvbench.tasks.recipes.plan import builder_arguments, loss_scaling, planned_schedule
from cvbench.zoo import list_models

pytestmark = pytest.mark.backend_agnostic


def _parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def test_list_and_get():
    assert list_recipes() == [
        "inception_v3_nvcnn",
        "resnet101_cvbench",
        "resnet152_cvbench",
        "resnet18_cvbench",
        "resnet34_cvbench",
        "resnet50_v1.5_250e",
        "resnet50_v1.5_90e",
        "ssd320_v1.2",
    ]
    assert get_recipe("ssd320_v1.2").model == "ssd320"
    with pytest.raises(ValueError, match=r"unknown recipe 'resnet50'; known: inception_v3_nvcnn"):
        get_recipe("resnet50")


def test_default_recipe_of_each_model(monkeypatch):
    assert default_recipe("resnet50").name == "resnet50_v1.5_90e"
    assert default_recipe("inception_v3").name == "inception_v3_nvcnn"
    assert default_recipe("ssd320").name == "ssd320_v1.2"
    for depth in (18, 34, 101, 152):  # no published recipe: cvbench's defaults
        assert default_recipe(f"resnet{depth}").name == f"resnet{depth}_cvbench"
    with pytest.raises(ValueError, match="unknown model 'mine'; known: inception_v3, resnet101"):
        default_recipe("mine")
    # A model registered in the zoo without a recipe says how to give it one.
    import cvbench.zoo

    monkeypatch.setattr(cvbench.zoo, "task_of", lambda name: "classification")
    with pytest.raises(ValueError, match="model 'mine' has no recipe .*register_recipe"):
        default_recipe("mine")


@pytest.mark.parametrize("model", list_models())
def test_every_registered_model_has_a_recipe(model):
    assert default_recipe(model).model == model


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


def test_a_knob_off_its_default_needs_a_source_one_at_its_default_does_not():
    recipe = get_recipe("ssd320_v1.2")
    # optimizer.larc_eta is OptimizerConfig's default (unused by SGD): no source needed ...
    assert recipe.source_of("optimizer.larc_eta") is None
    assert recipe.value("optimizer.larc_eta") == 0.003
    # ... but a value off the default is refused without one.
    with pytest.raises(ValueError, match="no source for optimizer.larc_eta"):
        dataclasses.replace(recipe, optimizer=recipe.optimizer.replace(larc_eta=0.01))
    own = {**recipe.sources, "optimizer.larc_eta": OwnDefault("a test")}
    changed = dataclasses.replace(
        recipe, optimizer=recipe.optimizer.replace(larc_eta=0.01), sources=own
    )
    assert str(changed.source_of("optimizer.larc_eta")) == "cvbench default (a test)"


def test_a_part_of_the_wrong_type_is_refused():
    recipe = get_recipe("ssd320_v1.2")
    with pytest.raises(ValueError, match="part 'schedule' must be a ScheduleConfig, got dict"):
        dataclasses.replace(recipe, schedule={"base_lr": 0.1})


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
    changed = recipe.with_overrides(
        {"run.batch_per_gpu": 128, "loss.mixup_alpha": 0.2}, reason="flags"
    )
    assert changed.value("run.batch_per_gpu") == 128
    assert changed.reference_value("run.batch_per_gpu") == 256
    assert changed.deviation("loss.mixup_alpha") == Deviation("loss.mixup_alpha", 0.0, "flags")
    assert recipe.value("run.batch_per_gpu") == 256  # the registered recipe is unchanged
    # Setting a knob back to the reference drops its deviation; the built-in ones stay.
    back = changed.with_overrides({"run.batch_per_gpu": 256}, reason="flags")
    assert back.deviation("run.batch_per_gpu") is None
    assert back.deviation("eval.drop_remainder") is not None
    # Overriding a deviating knob to the reference's value removes that deviation too.
    same = recipe.with_overrides({"eval.drop_remainder": True}, reason="--dle-eval")
    assert same.deviation("eval.drop_remainder") is None


def test_override_of_an_unset_knob_needs_no_source():
    recipe = get_recipe("ssd320_v1.2").with_overrides(
        {"loss.loss_scale": 128.0}, reason="--loss-scale"
    )
    assert recipe.deviation("loss.loss_scale").reference is None
    with pytest.raises(ValueError, match="has no knob 'model.bn_momentum'"):
        get_recipe("ssd320_v1.2").with_overrides({"model.bn_momentum": 0.9}, reason="x")


def test_the_resnet_optimizer_decays_the_fc_bias():
    config = get_recipe("resnet50_v1.5_90e").optimizer
    assert (config.name, config.momentum, config.weight_decay) == ("sgd", 0.875, 3.0517578125e-05)
    assert (config.decay_bias, config.decay_batchnorm, config.nesterov) == (True, False, False)


def test_the_inception_optimizer_is_larc_on_every_variable():
    config = get_recipe("inception_v3_nvcnn").optimizer
    assert (config.name, config.larc_eta, config.larc_mode, config.larc_epsilon) == (
        "lars",
        0.003,
        "clip",
        1.0,
    )
    assert (config.nesterov, config.decay_bias, config.decay_batchnorm) == (True, True, True)


def test_an_unscaled_recipe_keeps_its_rate_at_any_batch():
    recipe = get_recipe("inception_v3_nvcnn").with_overrides(
        {"schedule.scaling": "none"}, reason="x"
    )
    run = plan(recipe, num_gpus=1, train_images=1281167)  # global 128
    # scaling "none": the peak is base_lr whatever the batch (the Trainer's too).
    assert (run.peak_lr, planned_schedule(recipe, run).peak_lr(128)) == (1.0, 1.0)
    assert get_recipe("inception_v3_nvcnn").schedule.peak_lr(128) == 0.125  # 1.0 x 128 / 1024


def test_planned_schedule_resnet():
    recipe = get_recipe("resnet50_v1.5_90e")
    schedule = planned_schedule(recipe, plan(recipe, num_gpus=8, train_images=1281167))
    assert schedule == recipe.schedule.replace(warmup_steps=5000)  # int(625 x 8 epochs)
    assert (schedule.base_lr, schedule.reference_batch, schedule.decay_from) == (
        0.256, 256, "start")  # fmt: skip
    assert (schedule.decay, schedule.warmup_start_factor, schedule.end_factor) == (
        "cosine", 0.0, 0.0)  # fmt: skip


def test_loss_scaling():
    from cvbench.training.config import TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    static = loss_scaling(get_recipe("resnet50_v1.5_90e"))
    assert static == {"dynamic_loss_scale": False, "loss_scale": 128.0}
    assert loss_scaling(get_recipe("ssd320_v1.2")) == {"dynamic_loss_scale": True}
    assert loss_scaling(get_recipe("resnet18_cvbench")) == {"dynamic_loss_scale": True}
    assert set(static) <= fields


def test_loss_knobs_fit_the_loss():
    from cvbench.training.losses import SparseCrossEntropy

    loss = get_recipe("resnet50_v1.5_90e").loss
    assert (loss.label_smoothing, loss.smoothing_classes) == (0.1, 1001)
    assert {"label_smoothing", "smoothing_classes"} <= _parameters(SparseCrossEntropy.__init__)
    inception = get_recipe("inception_v3_nvcnn").loss
    assert (inception.label_smoothing, inception.smoothing_classes) == (0.0, None)
    assert get_recipe("resnet50_v1.5_250e").loss.mixup_alpha == 0.2
    assert get_recipe("resnet50_v1.5_90e").loss.mixup_alpha == 0.0


@pytest.mark.parametrize("name", [n for n in list_recipes() if not n.startswith("ssd")])
def test_builder_arguments_fit_the_builder(name):
    from cvbench.zoo import MODELS

    recipe = get_recipe(name)
    kwargs = builder_arguments(recipe)
    builder = MODELS.get(recipe.model)
    assert set(kwargs) <= _parameters(builder)
    assert kwargs["weights"] is None and kwargs["num_classes"] == 1000


def test_builder_arguments_ssd_fit_ssd320():
    from cvbench.detection.ssd import ssd320

    kwargs = builder_arguments(get_recipe("ssd320_v1.2"))
    assert set(kwargs) <= _parameters(ssd320)
    assert (kwargs["backbone_weights"], kwargs["freeze_batchnorm"]) == ("imagenet", True)
    assert kwargs["weight_decay"] == inspect.signature(ssd320).parameters["weight_decay"].default


def test_the_recipes_preprocessing_is_the_data_packages_own_object():
    from cvbench.data.read.image_preprocessing import ImagePreprocessing

    resnet = get_recipe("resnet50_v1.5_90e").preprocessing
    assert isinstance(resnet, ImagePreprocessing)
    assert (resnet.dct_method, resnet.fancy_upscaling) == ("INTEGER_FAST", False)
    # The other depths keep ImagePreprocessing's defaults (their pipeline before recipes).
    assert get_recipe("resnet18_cvbench").preprocessing == ImagePreprocessing()


def test_the_nvcnn_recipe_is_the_data_packages_nvcnn_preprocessing():
    # Two readings of nvcnn_hvd.py (the recipe's knobs and the data package's own
    # `ImagePreprocessing.nvcnn_inception_v3()`) must give the same pipeline: TF1 bilinear
    # resize, flip after it, uint8 quantization, inception scaling, central_crop then resize.
    from cvbench.data.read.image_preprocessing import ImagePreprocessing

    recipe = get_recipe("inception_v3_nvcnn").preprocessing
    assert recipe == ImagePreprocessing.nvcnn_inception_v3()


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
        "global batch 128 = 1 x 128, peak LR 0.128 (0.256 x 128 / 256), 10009 steps per epoch, "
        "900810 steps, "
        "warmup 80072 steps from 0"
    )


@pytest.mark.parametrize("module", ["cvbench.tasks.recipes", "cvbench.cli.recipes"])
def test_docstring_examples(module):
    outcome = doctest.testmod(importlib.import_module(module))
    assert outcome.attempted > 0
    assert outcome.failed == 0
