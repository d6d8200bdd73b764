"""`TaskRun.fit` on records without the split the task evaluates on: refused before the first
step when the fit will evaluate (`evaluate="end"`, the default, `"epoch"`, `eval_count`).
Before, the Python API trained the whole run and then failed listing the split; `cvbench
train` had the check (probe P51 F8), `TaskRun.fit` did not (stop 51's notes)."""

from __future__ import annotations

import pytest
from jpeg_records import write_jpeg_records

from cvbench.tasks import TaskOptions, make_task, prepare_run
from cvbench.training import TrainConfig


@pytest.fixture(scope="module")
def train_only(tmp_path_factory):
    """Records of a training split only (8 images, 4 classes): no validation shards."""
    records = tmp_path_factory.mktemp("train_only") / "records"
    write_jpeg_records(records / "train-00000-of-00001", 8, num_classes=4, prefix="train")
    return records


def _run(data_dir):
    task = make_task(
        TaskOptions(model="resnet18", image_size=32, num_classes=4, data_dir=str(data_dir),
                    settings={"epochs": 1})
    )  # fmt: skip
    config = TrainConfig(log_every=0, progress_bar=False, export=False)
    return prepare_run(task, batch_size=2, precision="fp32", config=config, steps_per_epoch=1)


@pytest.mark.parametrize(
    ("kwargs", "when"),
    [
        ({}, "fit(evaluate='end') evaluates on it; pass evaluate='none' to"),  # the default
        ({"evaluate": "epoch"}, "fit(evaluate='epoch') evaluates on it; pass evaluate='none' to"),
        (
            {"evaluate": "none", "eval_count": 1},
            "fit(eval_count=1) evaluates on it; pass evaluate='none' and no eval_count to",
        ),  # fmt: skip
    ],
)
def test_a_fit_that_evaluates_is_refused_before_its_first_step(train_only, kwargs, when):
    run = _run(train_only)
    with pytest.raises(FileNotFoundError) as caught:
        run.fit(**kwargs)
    assert str(caught.value) == (
        f"no validation split to evaluate on (no TFRecord files matching "
        f"'validation-?????-of-?????' in {train_only}; shard files present for: train): "
        f"{when} train without evaluating"
    )
    assert int(run.trainer.state["step"]) == 0  # before: the whole run trained first


def test_a_fit_without_evaluation_trains(train_only):
    run = _run(train_only)
    assert run.fit(evaluate="none") is None
    assert int(run.trainer.state["step"]) == 1
