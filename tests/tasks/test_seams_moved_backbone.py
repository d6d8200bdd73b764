"""A run whose starting weights' file moved away after it began is still evaluated, resumed,
predicted with and exported from: its checkpoint (or model file) holds every weight, and
what the file decided about the model is recorded in the run's knobs at the start.

- SSD320 `--backbone-weights FILE`: `DetectionTask` is a `RecordTask` like the classifiers,
  and a model restored from a checkpoint (`restore_from_checkpoint`) is built without its
  backbone weights (`builder_arguments(..., starting_weights=False)`). Before:
  `cvbench eval --checkpoint RUN` and `cvbench train --resume` exited 2 with
  `cvbench: error: weights file not found: '.../notop.h5'`.
- keras.applications' weights (`--weights FILE`): the normalization and architecture they
  bring are recorded as knobs, and `pretrained_start` no longer reads the file when the
  knobs already say so; a resume takes them from its checkpoint when the file is gone.
  Before: `--resume` of a ResNet-50 run from a keras.applications file exited 2 with
  `cvbench: error: resnet50: the checkpoint does not record the ResNet variant its starting
  weights <file> decide, and that file is not there to tell: put it back at that path`
  (with the variant told, the normalization would have differed next).
"""

from __future__ import annotations

import shutil

import keras
import pytest

from cvbench import cli


@pytest.fixture(scope="module")
def notop_h5(tmp_path_factory, legacy_h5):
    """keras.applications' ResNet-50 `_notop` file (random weights, legacy HDF5)."""
    model = keras.applications.ResNet50(weights=None, include_top=False)
    return legacy_h5(model, tmp_path_factory.mktemp("weights") / "notop.h5", 3)


def _ssd_train(weights, run) -> list[str]:
    return ["train", "--model", "ssd320", "--synthetic", "--backbone-weights", str(weights),
            "--image-size", "64", "--batch-size", "2", "--num-classes", "3", "--epochs", "1",
            "--steps-per-epoch", "1", "--precision", "fp32", "--eval", "none", "--no-progress",
            "--log-every", "0", "--seed", "1", "--log-dir", str(run)]  # fmt: skip


def test_ssd_run_is_evaluated_resumed_predicted_and_exported_after_its_backbone_file_moved(
    tmp_path, notop_h5, capsys
):
    weights = tmp_path / "notop.h5"
    shutil.copy(notop_h5, weights)
    run = tmp_path / "run"
    assert cli.main(_ssd_train(weights, run)) == 0
    evaluate = ["eval", "--checkpoint", str(run), "--synthetic", "--batch-size", "2"]
    capsys.readouterr()
    assert cli.main(evaluate) == 0
    before = capsys.readouterr().out  # on synthetic data: detections_per_image only
    weights.rename(tmp_path / "moved.h5")  # the file moved away
    assert cli.main(evaluate) == 0
    assert capsys.readouterr().out == before
    assert cli.main([*_ssd_train(weights, run), "--resume"]) == 0
    assert "weights file not found" not in capsys.readouterr().err
    image = tmp_path / "a.png"
    keras.utils.save_img(image, keras.ops.convert_to_numpy(keras.random.uniform((40, 50, 3))))
    model = run / "export" / "model.keras"
    assert cli.main(["predict", str(model), str(image), "--json"]) == 0
    out = tmp_path / "served"
    assert cli.main(["export", str(model), "--output", str(out)]) == 0
    assert (out / "saved_model.pb").is_file()


def test_a_restored_ssd_is_built_without_its_backbone_file(tmp_path, notop_h5):
    from cvbench.tasks.base import TaskOptions
    from cvbench.tasks.detection import DetectionTask
    from cvbench.tasks.recipes.resolve import resolve_recipe

    gone = tmp_path / "gone.h5"
    recipe = resolve_recipe("ssd320", settings={"image_size": 64})
    options = TaskOptions(model="ssd320", recipe=recipe, num_classes=3)
    task = DetectionTask(options, backbone_weights=str(gone))
    with pytest.raises((ValueError, OSError), match="weights file not found"):
        task.build_model()  # a fresh run reads its backbone file
    task.restore_from_checkpoint()
    task.check_trainable()  # the recipe's weights still count: frozen batch norms are fine
    model = task.build_model()
    assert model.output["classes"].shape[-1] == 3


def _classifier_train(weights, run) -> list[str]:
    return ["train", "--model", "resnet50", "--synthetic", "--weights", str(weights),
            "--image-size", "32", "--batch-size", "2", "--num-classes", "3", "--epochs", "2",
            "--steps-per-epoch", "1", "--precision", "fp32", "--eval", "none", "--no-progress",
            "--log-every", "0", "--seed", "1", "--no-export", "--log-dir", str(run)]  # fmt: skip


def test_a_keras_applications_run_resumes_and_evaluates_after_its_file_moved(
    tmp_path, notop_h5, capsys
):
    weights = tmp_path / "notop.h5"
    shutil.copy(notop_h5, weights)
    run = tmp_path / "run"
    train = _classifier_train(weights, run)
    assert cli.main(train) == 0
    weights.rename(tmp_path / "moved.h5")
    capsys.readouterr()
    assert cli.main([*train, "--resume"]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert "resumed from" in captured.out + captured.err
    assert cli.main(["eval", "--checkpoint", str(run), "--synthetic", "--batch-size", "2"]) == 0


def _task(weights, tmp_path):
    from cvbench.tasks.base import TaskOptions
    from cvbench.tasks.classification import ClassificationTask
    from cvbench.tasks.recipes.resolve import resolve_recipe

    settings = {"weights": str(weights), "image_size": 32, "num_classes": 3}
    recipe = resolve_recipe("resnet50", settings=settings)
    return ClassificationTask(TaskOptions(model="resnet50", recipe=recipe))


@pytest.mark.parametrize("name", ["resnet50", "inception_v3"])
def test_keras_applications_weights_record_their_normalization(tmp_path, notop_h5, name):
    from cvbench.tasks.base import TaskOptions
    from cvbench.tasks.classification import ClassificationTask
    from cvbench.tasks.recipes.resolve import resolve_recipe

    settings = {"weights": "imagenet", "image_size": 75, "num_classes": 3}
    recipe = resolve_recipe(name, settings=settings)
    task = ClassificationTask(TaskOptions(model=name, recipe=recipe))
    expected = {"resnet50": "caffe", "inception_v3": "inception"}[name]
    assert task.recipe.model_knobs.weights_normalization == expected


def test_the_recorded_normalization_is_taken_from_the_checkpoint_when_the_file_is_gone(
    tmp_path, notop_h5
):
    weights = tmp_path / "notop.h5"
    shutil.copy(notop_h5, weights)
    start = _task(weights, tmp_path).recipe  # what the run recorded at its start
    # caffe: RGB minus (123.68, 116.779, 103.939), unscaled; ResNet v1; keras' epsilon.
    assert start.preprocessing.mean == (123.68, 116.779, 103.939)
    assert start.model_knobs.weights_normalization == "caffe"
    weights.unlink()
    resumed = _task(weights, tmp_path)
    assert resumed.recipe.preprocessing.mean != start.preprocessing.mean  # cannot tell alone
    resumed.restore_from_checkpoint(recorded=lambda: dict(start.knobs()))
    assert dict(resumed.recipe.knobs()) == dict(start.knobs())


def test_an_older_checkpoint_without_the_normalization_is_refused_in_one_line(tmp_path, notop_h5):
    weights = tmp_path / "notop.h5"
    shutil.copy(notop_h5, weights)
    knobs = dict(_task(weights, tmp_path).recipe.knobs())
    del knobs["model.weights_normalization"]  # an older cvbench's checkpoint
    weights.unlink()
    resumed = _task(weights, tmp_path)
    with pytest.raises(ValueError, match="does not record the input normalization") as error:
        resumed.restore_from_checkpoint(recorded=lambda: knobs)
    assert "\n" not in str(error.value) and str(weights) in str(error.value)


def test_an_older_checkpoint_with_the_file_still_there_resumes_as_recorded(tmp_path, notop_h5):
    # A checkpoint of an older cvbench records no model.weights_normalization; with the
    # file there the task tells "caffe" itself, which would read as a difference from the
    # checkpoint's knobs ("unset in the checkpoint, caffe now") and refuse the resume.
    weights = tmp_path / "notop.h5"
    shutil.copy(notop_h5, weights)
    knobs = dict(_task(weights, tmp_path).recipe.knobs())
    del knobs["model.weights_normalization"]
    resumed = _task(weights, tmp_path)
    assert resumed.recipe.model_knobs.weights_normalization == "caffe"
    resumed.restore_from_checkpoint(recorded=lambda: knobs)
    now = dict(resumed.recipe.knobs())
    assert now.pop("model.weights_normalization") is None
    assert now == knobs  # every knob the checkpoint records, as it records it
