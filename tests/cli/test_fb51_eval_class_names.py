"""`cvbench eval` of a model on records of other classes, same count (probe P51 F12: a run
folder, its checkpoint and its model.keras scored top-1 0 with exit 0 on records rebuilt with
one class folder renamed): refused before evaluating, naming the first differing classes, the
model and the records' `dataset_info.json`, by the rule `--resume` applies
(`model_file.class_name_differences`). Records or models without names are not compared."""

from __future__ import annotations

import shutil

import pytest

import cvbench.cli as cli
from cvbench.utils.model_file import class_name_differences
from tests.reliability.test_hostile_runs import shapes_records

RUN = ["--model", "resnet18", "--image-size", "32", "--batch-size", "2", "--precision", "fp32"]
RUN += ["--steps-per-epoch", "1", "--epochs", "1", "--no-progress", "--log-every", "0"]
RUN += ["--eval", "none", "--seed", "0"]


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """A one-step run (with its export) on the shapes records; the same records rebuilt
    with `cross` renamed `box` (sorted first: classes 0 and 1 change names, every label of
    them shifts); the records without their `dataset_info.json` (no names)."""
    root = tmp_path_factory.mktemp("names")
    data = shapes_records(root / "a")
    renamed = shapes_records(root / "b", rename=("cross", "box"))
    unnamed = root / "unnamed"
    shutil.copytree(data, unnamed)
    (unnamed / "dataset_info.json").unlink()
    run = root / "run"
    assert cli.main(["train", *RUN, "--data-dir", str(data), "--log-dir", str(run)]) == 0
    return data, renamed, unnamed, run


def differ(model):
    return (
        f"{model} holds a model for other classes than the data in {{data}} (class names: 2 of "
        "6 differ (class 0 'circle' in the model, 'box' in {data}/dataset_info.json; class 1 "
        "'cross' in the model, 'circle' in {data}/dataset_info.json)); evaluate it on the "
        "records it was trained on"
    )


@pytest.mark.parametrize("way", ["run folder", "checkpoint", "model.keras"])
def test_eval_on_records_of_other_classes_is_refused(shapes_run, way, capsys):
    _, renamed, _, run = shapes_run
    newest = sorted((run / "checkpoints").glob("ckpt-*.npz"))[-1]
    given, named = {
        "run folder": (run, newest),  # eval takes the folder's newest checkpoint
        "checkpoint": (newest, newest),
        "model.keras": (run / "export" / "model.keras",) * 2,
    }[way]
    capsys.readouterr()
    argv = ["eval", "--data-dir", str(renamed), "--checkpoint", str(given), "--batch-size", "2"]
    assert cli.main(argv) == 2  # before: top1 0 (or whatever), exit 0
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing evaluated, no metric printed
    assert captured.err.strip().splitlines() == [
        "cvbench: error: " + differ(named).format(data=renamed)
    ]


def test_the_python_checkpoint_trainer_refuses_them_alike(shapes_run):
    from cvbench.tasks import TaskOptions, make_task
    from cvbench.tasks.evaluation import checkpoint_trainer

    _, renamed, _, run = shapes_run
    task = make_task(TaskOptions(model="resnet18", data_dir=str(renamed), image_size=32))
    model = run / "export" / "model.keras"
    with pytest.raises(ValueError) as caught:
        checkpoint_trainer(task, model, precision="fp32")
    assert str(caught.value) == differ(model).format(data=renamed)


def test_records_without_names_and_its_own_records_are_still_evaluated(shapes_run, capsys):
    data, _, unnamed, run = shapes_run
    for records in (data, unnamed):
        argv = ["eval", "--data-dir", str(records), "--checkpoint", str(run), "--batch-size", "2"]
        assert cli.main(argv) == 0, capsys.readouterr().err
        assert "top1: " in capsys.readouterr().out


def test_the_checkpoint_records_the_names_eval_compares(shapes_run):
    from cvbench.data import read_dataset_info
    from cvbench.tasks.evaluation import saved_class_names

    data, _, _, run = shapes_run
    names = read_dataset_info(data).class_names
    assert names == ("circle", "cross", "diamond", "square", "star", "triangle")
    assert saved_class_names(run) == names
    assert saved_class_names(run / "export" / "model.keras") == names


def test_the_one_rule_names_both_sources():
    where = ("in the model", "in d/dataset_info.json")
    assert class_name_differences(["a", "b"], ["a", "c"], where=where) == (
        "class names: 1 of 2 differ (class 1 'b' in the model, 'c' in d/dataset_info.json)"
    )
    names = list("abcde")
    assert class_name_differences(names, list("vwxyz")) == (
        "class names: 5 of 5 differ (class 0 'a' in the checkpoint, 'v' now; class 1 'b' in "
        "the checkpoint, 'w' now; class 2 'c' in the checkpoint, 'x' now; ...)"
    )
    assert class_name_differences(names, names) is None
    assert class_name_differences(None, names) is None  # an older file: no names
    assert class_name_differences(names, None) is None  # records without dataset_info.json
    # A model trained without names (--num-classes only) holds the indices "0", "1", ...:
    # eval does not compare them (indices_unnamed); --resume compares them as names, as it
    # always did (review V51 F4: digit class folders relabelled resumed without a word).
    indices = ["0", "1", "2", "3", "4"]
    assert class_name_differences(indices, names, indices_unnamed=True) is None
    assert class_name_differences(names, indices, indices_unnamed=True) is None
    assert class_name_differences(["0", "1", "2"], ["0", "1", "two"]) == (
        "class names: 1 of 3 differ (class 2 '2' in the checkpoint, 'two' now)"
    )
    # COCO's unused ids, named "N/A" from records and "coco_id_<id>" in a model file of a run
    # without them, are no class (review V51 F3: eval refused a 90-class SSD for them).
    assert class_name_differences(["person", "coco_id_12"], ["person", "N/A"]) is None
    assert "'person' in the checkpoint, 'dog' now" in class_name_differences(
        ["person", "coco_id_12"], ["dog", "N/A"]
    )
