"""A run started from `--weights FILE` (or `imagenet`) is evaluated and resumed from its
checkpoint, which holds every weight, after that file moved away (or with an empty Keras
cache, nothing downloaded): a model restored from a checkpoint is built without its
starting weights (`RecordTask.restore_from_checkpoint`, `builder_arguments(...,
starting_weights=False)`), its architecture fixed by the recipe (`model.variant`).

Before: `cvbench eval --checkpoint RUN` and `cvbench train --resume` both exited 2 with
`cvbench: error: weights file not found: 'w.weights.h5'`.
"""

from __future__ import annotations

import shutil

import keras
import pytest

from cvbench import cli
from cvbench.models import pretrained
from cvbench.tasks.base import TaskOptions
from cvbench.tasks.classification import ClassificationTask
from cvbench.tasks.recipes.plan import builder_arguments
from cvbench.tasks.recipes.resolve import resolve_recipe
from cvbench.zoo import get_model

_COMMON = ["--model", "resnet18", "--synthetic", "--image-size", "32", "--batch-size", "2",
           "--num-classes", "3", "--precision", "fp32", "--seed", "1"]  # fmt: skip


def _results(capsys) -> list[str]:
    out = capsys.readouterr().out.splitlines()
    return [line for line in out if line.split(":")[0] in ("loss", "top1", "top5")]


def test_eval_and_resume_of_a_weights_file_run_after_the_file_moved(tmp_path, capsys):
    model = get_model("resnet18", num_classes=3, input_shape=(32, 32, 3))
    weights = tmp_path / "start.weights.h5"
    model.save_weights(weights)
    run = tmp_path / "run"
    train = ["train", *_COMMON, "--weights", str(weights), "--epochs", "2"]
    train += ["--steps-per-epoch", "1", "--eval", "none", "--log-dir", str(run), "--no-progress"]
    assert cli.main([*train[:-1], "--no-progress"]) == 0
    evaluate = ["eval", "--checkpoint", str(run), "--synthetic", "--batch-size", "2"]
    capsys.readouterr()
    assert cli.main(evaluate) == 0
    before = _results(capsys)
    assert len(before) == 2  # loss and top1: no top-5 for a classifier of 3 classes
    shutil.move(weights, tmp_path / "elsewhere.weights.h5")  # the file moved away
    assert cli.main(evaluate) == 0
    assert _results(capsys) == before  # the same weights: the checkpoint's
    # A resume of the finished run builds the model, restores it and has nothing left.
    assert cli.main([*train, "--resume"]) == 0
    assert "weights file not found" not in capsys.readouterr().err


def test_a_fresh_run_still_needs_its_starting_weights(tmp_path, capsys):
    # No checkpoint to restore (resume of an empty folder): the file is read, and missing
    # it is the one-line error it always was.
    train = ["train", *_COMMON, "--weights", str(tmp_path / "gone.weights.h5"), "--epochs", "1"]
    train += ["--steps-per-epoch", "1", "--eval", "none", "--log-dir", str(tmp_path / "run")]
    assert cli.main([*train, "--no-progress", "--resume"]) == 2
    assert "weights file not found" in capsys.readouterr().err


def test_builder_arguments_without_starting_weights_keep_the_architecture():
    recipe = resolve_recipe("resnet50", settings={"weights": "imagenet", "image_size": 32})
    task = ClassificationTask(TaskOptions(model="resnet50", recipe=recipe))
    start = builder_arguments(task.recipe)
    restored = builder_arguments(task.recipe, starting_weights=False)
    # keras.applications' weights make the model ResNet v1; the recipe says so itself.
    assert (start["weights"], start["variant"]) == ("imagenet", "v1")
    assert (restored["weights"], restored["variant"]) == (None, "v1")
    assert {k: v for k, v in start.items() if k != "weights"} == {
        k: v for k, v in restored.items() if k != "weights"
    }


@pytest.mark.parametrize("name", ["resnet50", "resnet101"])
def test_imagenet_run_restored_with_an_empty_keras_cache_downloads_nothing(
    monkeypatch, tmp_path, name
):
    def no_download(*args, **kwargs):
        raise AssertionError("nothing may be downloaded")

    monkeypatch.setattr(keras.utils, "get_file", no_download)
    (tmp_path / "keras_home").mkdir()
    monkeypatch.setattr(pretrained, "CACHE_DIR", str(tmp_path / "keras_home"))
    recipe = resolve_recipe(name, settings={"weights": "imagenet", "image_size": 32})
    task = ClassificationTask(TaskOptions(model=name, recipe=recipe))
    with pytest.raises(ConnectionError, match="nothing may be downloaded"):
        task.build_model()  # a fresh run needs the file (here: would download it)
    task.restore_from_checkpoint()
    model = task.build_model()
    # Built as ResNet v1, as the run was: the stride of stage 3 in its first 1x1 conv.
    assert model.get_layer("conv3_block1_1_conv").strides == (2, 2)
    assert model.get_layer("conv3_block1_2_conv").strides == (1, 1)
    assert list(tmp_path.joinpath("keras_home").iterdir()) == []


def _resnet50_weights_file(tmp_path):
    """A cvbench ResNet-50 weight file (not keras.applications': the recipe's v1.5)."""
    model = get_model("resnet50", num_classes=3, input_shape=(32, 32, 3))
    path = tmp_path / "own.weights.h5"
    model.save_weights(path)
    return path


def test_own_resnet50_weights_record_variant_v1_5_and_restore_without_the_file(tmp_path):
    path = _resnet50_weights_file(tmp_path)
    settings = {"weights": str(path), "image_size": 32, "num_classes": 3}
    task = ClassificationTask(
        TaskOptions(model="resnet50", recipe=resolve_recipe("resnet50", settings=settings))
    )
    assert task.recipe.model_knobs.variant == "v1.5"
    path.unlink()  # moved away: the recipe (the checkpoint's knobs) still says v1.5
    task.restore_from_checkpoint()
    model = task.build_model()
    assert model.get_layer("conv3_block1_1_conv").strides == (1, 1)
    assert model.get_layer("conv3_block1_2_conv").strides == (2, 2)


def test_an_older_checkpoint_without_the_variant_and_without_the_file_is_refused(tmp_path):
    # A checkpoint of an older cvbench records no model.variant; keras.applications' file
    # would make the model v1, another file v1.5: without the file that cannot be told, so
    # it is refused rather than built as a guess.
    settings = {"weights": str(tmp_path / "gone.h5"), "image_size": 32, "num_classes": 3}
    task = ClassificationTask(
        TaskOptions(model="resnet50", recipe=resolve_recipe("resnet50", settings=settings))
    )
    assert task.recipe.model_knobs.variant is None
    task.restore_from_checkpoint()
    with pytest.raises(ValueError, match="does not record the ResNet variant"):
        task.build_model()
