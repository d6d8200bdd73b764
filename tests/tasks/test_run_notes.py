"""What a run says besides its recipe: the precision used and why, the overrides, and a
warning when the warmup is longer than the run."""

from __future__ import annotations

import warnings

import pytest

from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.tasks.recipes import get_recipe
from cvbench.tasks.runner import overrides, precision_note


def tiny_task(**settings) -> ClassificationTask:
    options = TaskOptions(model="resnet18", image_size=32, num_classes=4, synthetic_steps=2,
                          settings=settings, reasons={k: f"--{k}" for k in settings})  # fmt: skip
    return ClassificationTask(options)


def test_a_warmup_longer_than_the_run_warns():
    # resnet18_cvbench warms up 8 epochs; 1 epoch of 2 steps is 2 steps, warmup int(2 x 8) = 16.
    with pytest.warns(UserWarning, match=r"the warmup \(16 steps\) is longer than the run \(2"):
        prepare_run(tiny_task(epochs=1), batch_size=4, precision="fp32", distribution="single")


def test_a_warmup_within_the_run_does_not_warn():
    # 10 epochs of 2 steps = 20 steps > 16.
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        prepare_run(tiny_task(epochs=10), batch_size=4, precision="fp32", distribution="single")


def test_the_banner_states_precision_reason_and_overrides(capsys):
    run = prepare_run(tiny_task(epochs=10), batch_size=4, precision="fp32", distribution="single")
    first, second = capsys.readouterr().out.splitlines()[:2]
    # 0.256 x 4 / 256 = 0.004; 10 epochs x 2 steps; int(2 x 8) warmup.
    assert first == (
        "cvbench: recipe resnet18_cvbench: global batch 4 = 1 x 4, peak LR 0.004 (0.256 x 4 / "
        "256), 2 steps per epoch, 20 steps, warmup 16 steps from 0, precision float32 (asked; "
        "the recipe's is mixed_float16)"
    )
    assert second == (
        "cvbench: overrides of resnet18_cvbench: run.epochs 10 (--epochs); model.image_size 32 "
        "(image_size); model.num_classes 4 (num_classes)"
    )
    assert run.notes.precision == "float32"


def test_precision_note_names_auto_and_the_recipes_precision():
    recipe = get_recipe("resnet50_v1.5_90e")  # the recipe says fp16
    assert precision_note(recipe, "mixed_float16", "fp16") == "asked"
    note = precision_note(recipe, "float32", "auto")
    assert note.startswith("auto: ") and note.endswith("; the recipe's is mixed_float16")


def test_overrides_are_the_knobs_off_the_named_recipe():
    recipe = get_recipe("resnet50_v1.5_90e")
    assert overrides(recipe) == ()
    changed = recipe.with_overrides({"run.batch_per_gpu": 64}, reason="--batch-size")
    assert overrides(changed) == (("run.batch_per_gpu", 64, "--batch-size"),)
