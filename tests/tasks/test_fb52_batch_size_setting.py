"""P52 F11: `TaskOptions(settings={"batch_size": 0})` was accepted (the recipe's
`run.batch_per_gpu` 0, a deep traceback later in `prepare_run`, or silently replaced by
`prepare_run(batch_size=...)`), and `prepare_run(batch_size=0)` ran at the recipe's batch.
Both are refused at once, naming the setting."""

import pytest

from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run


@pytest.mark.parametrize("value", [0, -4, True, 2.0, "8"])
def test_a_batch_size_setting_that_is_not_a_positive_int_is_refused(value):
    expected = f"batch_size must be a positive int (images per rank and step), got {value!r}"
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        TaskOptions(model="resnet18", settings={"batch_size": value})


def test_the_reason_names_the_flag():
    with pytest.raises(ValueError, match=r"^--batch-size must be a positive int"):
        TaskOptions(model="resnet18", settings={"batch_size": 0},
                    reasons={"batch_size": "--batch-size"})  # fmt: skip


def test_a_positive_batch_size_sets_the_recipe_knob():
    options = TaskOptions(model="resnet18", settings={"batch_size": 3})
    assert options.recipe.run.batch_per_gpu == 3


def test_prepare_run_refuses_batch_size_zero():
    task = ClassificationTask(TaskOptions(model="resnet18", image_size=32, num_classes=3))
    with pytest.raises(ValueError, match=r"^batch_size must be a positive int .*got 0$"):
        prepare_run(task, batch_size=0, precision="fp32", distribution="single")
