"""`cvbench train --steps-per-epoch N` on a recipe counted in images (SSD320 v1.2: 100,000
steps of 32 images at 1 GPU) trains exactly the planned steps, without TaskRun.fit's length
warning (review V51 F1: the CLI passed N to `fit` again, which overrode the divisor
`fit_lengths` had chosen: 20,000 epochs of 7 steps = 140,000 steps, and the new warning told
the user to plan the run they had planned)."""

from __future__ import annotations

import types
import warnings

import pytest

from cvbench.tasks import runner
from cvbench.tasks.recipes.plan import fit_lengths, plan
from cvbench.tasks.recipes.registered import get_recipe
from cvbench.tasks.runner import TaskRun


@pytest.fixture(autouse=True)
def _no_run_log_record(monkeypatch):
    monkeypatch.setattr(runner, "recipe_record", lambda *a, **k: {})  # notes are a stub


class _Trainer:
    is_chief = True

    def fit(self, data, **kwargs):
        self.asked = kwargs


def _run(train_images: int) -> TaskRun:
    recipe = get_recipe("ssd320_v1.2")
    planned = plan(recipe, num_gpus=1, train_images=train_images, batch_per_gpu=32)
    notes = types.SimpleNamespace(recipes_schedule=True)
    return TaskRun(
        task=types.SimpleNamespace(recipe=recipe), trainer=_Trainer(),
        train=types.SimpleNamespace(data=None, steps_per_epoch=planned.steps_per_epoch),
        batch_size=32, plan=planned, notes=notes,
    )  # fmt: skip


@pytest.mark.parametrize("passed", [None, "the plan's"])
def test_the_plans_steps_per_epoch_trains_exactly_the_planned_steps(passed):
    run = _run(7 * 32)  # --steps-per-epoch 7: 7 steps of data per epoch
    # 100,000 steps = 20,000 x 5 (5: the largest divisor of 100,000 at most 7).
    assert (run.plan.total_steps, fit_lengths(run.plan)) == (100_000, (20_000, 5))
    spe = None if passed is None else run.plan.steps_per_epoch
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no length warning
        run.fit(steps_per_epoch=spe, evaluate="none")
    asked = run.trainer.asked
    assert (asked["epochs"], asked["steps_per_epoch"]) == (20_000, 5)


def test_another_steps_per_epoch_still_warns():
    run = _run(7 * 32)
    with pytest.warns(UserWarning, match=r"fit\(steps_per_epoch=4\) trains 80000 steps"):
        run.fit(steps_per_epoch=4, evaluate="none")  # 20,000 epochs x 4
