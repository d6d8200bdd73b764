"""`cvbench train --crop-area-range LOW,HIGH`: NVIDIA's random-crop area range as a flag (#39
item 7), set on the recipe's knob (classifiers: `preprocessing.area_range` of the recipe's
`ImagePreprocessing`; SSD320: `detection.crop_area_range`) as a deviation naming the flag,
and reaching what the task's training pipeline is given."""

from __future__ import annotations

import pytest

import cvbench.cli as cli
from cvbench.cli.task_args import task_from_args
from cvbench.tasks.recipes import get_recipe


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))


def _task(argv):
    return task_from_args(cli.build_parser().parse_args(["train", *argv]))


@pytest.mark.parametrize(
    "model, recipe, reference",
    [
        ("resnet50", "resnet50_v1.5_90e", (0.05, 1.0)),  # DLE's area range
        ("inception_v3", "inception_v3_nvcnn", (0.1, 1.0)),  # nvcnn's
        ("resnet18", "resnet18_cvbench", (0.05, 1.0)),
    ],
)
@pytest.mark.parametrize("flag, value", [("0.35,1", (0.35, 1.0)), ("0.5,0.9", (0.5, 0.9))])
def test_the_flag_sets_the_classifiers_crop_area(model, recipe, reference, flag, value):
    assert get_recipe(recipe).value("preprocessing.area_range") == reference
    task = _task(["--model", model, "--synthetic", "--crop-area-range", flag])
    assert task.recipe.name == recipe
    assert task.recipe.value("preprocessing.area_range") == value
    assert task.preprocessing().area_range == value  # what the training pipeline is given
    deviation = task.recipe.deviation("preprocessing.area_range")
    assert (deviation.reference, deviation.reason) == (reference, "--crop-area-range")


def test_the_flag_sets_the_ssd_crop_area():
    task = _task(["--model", "ssd320", "--synthetic", "--backbone-weights", "b.h5",
                  "--crop-area-range", "0.3,1"])  # fmt: skip
    assert task.recipe.value("detection.crop_area_range") == (0.3, 1.0)
    assert task.train_options()["augmentation"].crop_area_range == (0.3, 1.0)
    deviation = task.recipe.deviation("detection.crop_area_range")
    assert (deviation.reference, deviation.reason) == ((0.75, 1.0), "--crop-area-range")


def test_without_the_flag_the_recipes_range_stays():
    task = _task(["--model", "resnet50", "--synthetic"])
    assert task.recipe.value("preprocessing.area_range") == (0.05, 1.0)
    assert task.recipe.deviation("preprocessing.area_range") is None


@pytest.mark.parametrize("bad", ["0.5", "0,1", "0.8,0.5", "0.5,1.5", "a,b", "0.1,0.2,0.3"])
def test_a_bad_range_is_a_usage_error_naming_it(capsys, bad):
    with pytest.raises(SystemExit) as exit_:  # argparse's usage error
        cli.main(["train", "--model", "resnet18", "--synthetic", "--crop-area-range", bad])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert "--crop-area-range: expected LOW,HIGH with 0 < LOW <= HIGH <= 1" in err
    assert repr(bad) in err
