"""What a run says besides its recipe: the precision used and why, the overrides, and the
cap of a warmup longer than the run."""

from __future__ import annotations

import warnings

import pytest

from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.tasks.recipes import get_recipe
from cvbench.tasks.runner import overrides, precision_note, recipe_record


def tiny_task(**settings) -> ClassificationTask:
    options = TaskOptions(model="resnet18", image_size=32, num_classes=4, synthetic_steps=2,
                          settings=settings, reasons={k: f"--{k}" for k in settings})  # fmt: skip
    return ClassificationTask(options)


# resnet18_cvbench warms up 8 epochs: int(steps per epoch x 8) steps, longer than these runs
# of epochs x steps per epoch steps, so capped at half the run (total // 2):
# 1 x 2 = 2 steps, warmup 16 -> 1; 2 x 2 = 4, warmup 16 -> 2; 1 x 3 = 3, warmup 24 -> 1.
@pytest.mark.parametrize(
    "epochs, steps, total, recipe_warmup, warmup",
    [(1, 2, 2, 16, 1), (2, 2, 4, 16, 2), (1, 3, 3, 24, 1)],
)
def test_a_warmup_longer_than_the_run_is_capped_at_half_the_run(
    capsys, epochs, steps, total, recipe_warmup, warmup
):
    run = prepare_run(tiny_task(epochs=epochs), batch_size=4, precision="fp32",
                      distribution="single", steps_per_epoch=steps)  # fmt: skip
    assert (run.plan.total_steps, run.plan.warmup_steps) == (total, warmup)
    assert run.plan.warmup_capped_from == recipe_warmup
    assert run.trainer._schedule_spec.warmup_steps == warmup  # what the Trainer runs
    first = capsys.readouterr().out.splitlines()[0]
    assert (
        f"{total} steps, warmup {warmup} steps from 0 (capped at half the run: the recipe's "
        f"{recipe_warmup}-step warmup is longer than the run; --warmup-epochs sets it)"
    ) in first
    record = recipe_record(run.task.recipe, run.plan)
    assert record["plan"]["warmup_capped_from"] == recipe_warmup


def test_a_warmup_within_the_run_is_not_capped(capsys):
    # 10 epochs of 2 steps = 20 steps >= 16: the recipe's warmup, nothing said.
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        run = prepare_run(tiny_task(epochs=10), batch_size=4, precision="fp32",
                          distribution="single")  # fmt: skip
    assert (run.plan.warmup_steps, run.plan.warmup_capped_from) == (16, None)
    assert "capped" not in capsys.readouterr().out


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
