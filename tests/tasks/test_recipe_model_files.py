"""Every classification recipe's model file states what its evaluation pipeline does: the
file's `ModelInfo` (resize rule, crop fraction, interpolation) brings an image file to the
very pixels the pipeline gives the model, and `cvbench predict` of the file gives the
pipeline's top-1.

PNG and JPEG files: a JPEG decodes by the file's `dct_method` and `fancy_upscaling` (the DLE
and nvcnn recipes: `INTEGER_FAST` without fancy upscaling; the others TensorFlow's defaults),
so that predict sees the pipeline's pixels (Pillow's defaults would differ by a few levels)."""

from __future__ import annotations

import json
from dataclasses import replace

import keras
import numpy as np
import pytest
from PIL import Image

from cvbench.cli import main
from cvbench.data.read.preprocessing import preprocess_for_eval
from cvbench.inference import save_model
from cvbench.inference.images import read_image
from cvbench.inference.resize import resize_image
from cvbench.tasks import ClassificationTask, TaskOptions
from cvbench.tasks.recipes import get_recipe, list_recipes

pytestmark = pytest.mark.backend_agnostic  # predict runs on JAX too; the pipeline is tf.data

RECIPES = [name for name in list_recipes() if get_recipe(name).task == "classification"]
# image sizes: smaller than every input (upsampled), larger, square, long and thin
SIZES = [(45, 61), (375, 500), (320, 320), (17, 400)]


def _task(name: str) -> ClassificationTask:
    recipe = get_recipe(name)
    return ClassificationTask(TaskOptions(model=recipe.model, recipe=name, num_classes=3))


@pytest.fixture(scope="module", params=["png", "jpg"])
def image_files(tmp_path_factory, request):
    folder = tmp_path_factory.mktemp(request.param)
    rng = np.random.default_rng(11)
    for i, (h, w) in enumerate(SIZES):
        # smooth + noise: a resize that differs by a sub-pixel moves values measurably
        ramp = np.linspace(0, 150, w)[None, :, None] + np.linspace(0, 50, h)[:, None, None]
        tint = np.eye(3)[i % 3] * 60  # a colour cast per image: the classes differ
        pixels = np.clip(ramp + tint + rng.integers(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.{request.param}")  # JPEG: quality 75, 4:2:0
    return sorted(folder.glob(f"*.{request.param}"))


def _pipeline(task: ClassificationTask, files, **scaling) -> np.ndarray:
    import tensorflow as tf

    p = replace(task.preprocessing(), **scaling)
    return np.stack([
        preprocess_for_eval(tf.constant(f.read_bytes()), image_size=task.image_size,
                            preprocessing=p).numpy()
        for f in files
    ])  # fmt: skip


@pytest.mark.parametrize("name", RECIPES)
def test_the_files_rule_gives_the_pipelines_pixels(name, image_files):
    task = _task(name)
    info = task.model_info()
    # the pipeline's pixels before scaling: mean 0, std 1 (x - 0) / 1
    views = _pipeline(task, image_files, input_scaling="mean_std", mean=(0.0,) * 3, std=(1.0,) * 3)
    mine = np.stack([resize_image(read_image(f, info=info), info)[0] for f in image_files])
    assert mine.shape == (len(SIZES), task.image_size, task.image_size, 3)
    np.testing.assert_array_equal(mine, views)


def _tiny_classifier(size: int, calibration: np.ndarray) -> keras.Model:
    """Three logits from a strided convolution and pooling (any model shows the contract),
    the last bias centring the logits of `calibration` images (random features share a large
    common part that would otherwise pick one class for all)."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input((size, size, 3))
    x = keras.layers.Conv2D(8, 7, strides=4, activation="relu")(inputs)
    features = keras.layers.GlobalAveragePooling2D()(x)
    dense = keras.layers.Dense(3)
    model = keras.Model(inputs, dense(features))
    mean = np.asarray(keras.Model(inputs, features)(calibration)).mean(0)
    kernel = np.asarray(dense.kernel) * 10
    dense.set_weights([kernel, -(mean @ kernel)])
    return model


@pytest.mark.parametrize("name", ["inception_v3_nvcnn", "resnet50_v1.5_90e"])
def test_predict_of_the_file_gives_the_pipelines_top_1(name, image_files, tmp_path, capsys):
    task = _task(name)
    batch = _pipeline(task, image_files)  # the pipeline's normalized model input
    model = _tiny_classifier(task.image_size, batch)
    path = save_model(task.user_model(model), tmp_path / "model.keras", task.model_info())
    logits = np.asarray(model(batch))
    assert main(["predict", str(path), *map(str, image_files), "--json", "--top-k", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [line["source"] for line in lines] == [str(f) for f in image_files]
    top1 = [line["classes"][0]["class_id"] for line in lines]
    assert top1 == logits.argmax(-1).tolist()
    assert len(set(top1)) > 1  # the images tell apart (not one class for all)
    for line, row in zip(lines, logits, strict=True):
        probs = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        scores = [c["score"] for c in line["classes"]]
        np.testing.assert_allclose(scores, np.sort(probs)[::-1], atol=1e-5)
