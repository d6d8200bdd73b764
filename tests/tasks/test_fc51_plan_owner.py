"""The plan (`prepare_run`, from the recipe) owns the run's length, rate and warmup (probe p51
F1, F7, F9): `TaskRun.fit(epochs=N)` at another length than the plan's says that it does not
replan; the banner of a run with the caller's optimizer claims no recipe rate, warmup or
length; an explicit warmup longer than the run is refused, not silently capped."""

from __future__ import annotations

import warnings

import keras
import pytest

import cvbench.cli as cli
from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.tasks.recipes import get_recipe, plan
from cvbench.training import TrainConfig

QUIET = TrainConfig(log_every=0, progress_bar=False, export=False)


def tiny_task(**settings) -> ClassificationTask:
    options = TaskOptions(model="resnet18", image_size=32, num_classes=4, synthetic_steps=2,
                          settings=settings, reasons={k: f"--{k}" for k in settings})  # fmt: skip
    return ClassificationTask(options)


def user_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, UserWarning)]


# F1 ------------------------------------------------------------------------------------------
def test_fit_at_another_length_than_the_plan_warns_once_how_to_plan_it():
    # resnet18_cvbench: 90 epochs x 2 steps = 180 steps, warmup int(2 x 8) = 16, peak
    # 0.256 x 4 / 256 = 0.004. fit(epochs=1) trains 2 of them, all in the warmup.
    run = prepare_run(tiny_task(), batch_size=4, precision="fp32", distribution="single",
                      config=QUIET)  # fmt: skip
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        run.fit(epochs=1, evaluate="none")
        run.fit(epochs=2, evaluate="none")  # carries on: the schedule is already laid out
    assert user_warnings(record) == [
        "fit(epochs=1) trains 2 steps, not the 180 steps resnet18_cvbench is planned for (90 "
        "epochs): the schedule ends with these 2 steps but keeps the plan's peak LR 0.004 and "
        "16-step warmup (as long as the run or longer: the rate only rises); to plan the run, "
        'make the task with TaskOptions(settings={"epochs": 1}) (cvbench train --epochs 1) '
        "and call fit()"
    ]
    assert run.trainer.learning_rate_at(2) == pytest.approx(0.004 * 1 / 16)  # still warming up


def test_fit_of_the_planned_run_says_nothing_and_leaves_the_warmup():
    # Planned for 1 epoch (2 steps): warmup 16 capped at 2 // 2 = 1, as cvbench train --epochs 1.
    run = prepare_run(tiny_task(epochs=1), batch_size=4, precision="fp32",
                      distribution="single", config=QUIET)  # fmt: skip
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        run.fit(epochs=1, evaluate="none")
    assert user_warnings(record) == []
    assert run.plan.warmup_steps == 1
    assert run.trainer.learning_rate_at(2) == pytest.approx(0.004)  # the peak after 1 step


def test_fit_with_the_callers_schedule_says_nothing():
    run = prepare_run(tiny_task(), batch_size=4, precision="fp32", distribution="single",
                      config=QUIET, optimizer=keras.optimizers.SGD(0.01))  # fmt: skip
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        run.fit(epochs=1, evaluate="none")
    assert user_warnings(record) == []


# F9 ------------------------------------------------------------------------------------------
def test_the_banner_of_the_callers_schedule_claims_no_recipe_rate_warmup_or_length(capsys):
    prepare_run(tiny_task(), batch_size=4, precision="fp32", distribution="single",
                config=QUIET, optimizer=keras.optimizers.SGD(0.01))  # fmt: skip
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        "cvbench: recipe resnet18_cvbench: global batch 4 = 1 x 4, 2 steps per epoch, precision "
        "float32 (asked; the recipe's is mixed_float16); optimizer and schedule: the caller's"
    )


def test_describe_without_the_schedule_is_the_batch_and_the_epoch():
    run_plan = plan(get_recipe("resnet18_cvbench"), num_gpus=1, train_images=144,
                    batch_per_gpu=16)  # fmt: skip
    assert run_plan.describe(schedule=False) == "global batch 16 = 1 x 16, 9 steps per epoch"
    assert run_plan.describe().startswith(
        "global batch 16 = 1 x 16, peak LR 0.016 (0.256 x 16 / 256), 9 steps per epoch, 810 "
        "steps, warmup 72 steps from 0"
    )


# F7 ------------------------------------------------------------------------------------------
def test_an_explicit_warmup_longer_than_the_run_is_refused_naming_the_flag():
    # 1 epoch of 2 steps; --warmup-epochs 5: int(2 x 5) = 10 warmup steps.
    with pytest.raises(ValueError) as caught:
        prepare_run(tiny_task(epochs=1, warmup_epochs=5), batch_size=4, precision="fp32",
                    distribution="single", config=QUIET)  # fmt: skip
    assert str(caught.value) == (
        "--warmup_epochs 5 is longer than the run's 1 epoch (10 warmup steps, 2 in the run): "
        "set it to at most 1, or leave it out (the recipe's warmup is then capped at half a "
        "run it is longer than)"
    )


def test_an_explicit_warmup_within_the_run_is_honoured(capsys):
    run = prepare_run(tiny_task(epochs=1, warmup_epochs=1), batch_size=4, precision="fp32",
                      distribution="single", config=QUIET)  # fmt: skip
    assert (run.plan.warmup_steps, run.plan.warmup_capped_from) == (2, None)
    assert "capped" not in capsys.readouterr().out


def test_the_recipes_own_warmup_is_still_capped():
    run = prepare_run(tiny_task(epochs=1), batch_size=4, precision="fp32",
                      distribution="single", config=QUIET)  # fmt: skip
    assert (run.plan.warmup_steps, run.plan.warmup_capped_from) == (1, 16)
    assert "the recipe's 16-step warmup" in run.plan.describe()


def test_cvbench_train_refuses_warmup_epochs_longer_than_the_run(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))
    argv = ["train", "--model", "resnet18", "--synthetic", "--batch-size", "2", "--image-size",
            "32", "--num-classes", "3", "--precision", "fp32", "--epochs", "1",
            "--steps-per-epoch", "2", "--warmup-epochs", "5", "--no-progress"]  # fmt: skip
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == (
        "cvbench: error: --warmup-epochs 5 is longer than the run's 1 epoch (10 warmup steps, "
        "2 in the run): set it to at most 1, or leave it out (the recipe's warmup is then "
        "capped at half a run it is longer than)"
    )
    assert "Traceback" not in captured.err
