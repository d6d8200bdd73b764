"""The SSD augmentation's settings and colour jitter: the OD API's four colour operations (an
independent numpy/colorsys computation here), the recipe knobs reaching `coco_dataset`, and
tests that fail when a knob is ignored."""

from __future__ import annotations

import colorsys
import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cvbench.data.coco_schema import CocoImage, CocoObject, coco_example
from cvbench.data.read import coco
from cvbench.data.read.coco_augment import (
    DetectionAugmentation,
    color_jitter,
    jitter_factors,
)
from cvbench.tasks import DetectionTask, TaskOptions
from cvbench.tasks.recipes import get_recipe

H, W = 40, 56
BOX = (0.1, 0.1, 0.6, 0.5)  # [ymin, xmin, ymax, xmax]: not mirror-symmetric


def _od_api_jitter(image: np.ndarray, factors) -> np.ndarray:
    """OD API `random_adjust_{brightness,contrast,saturation,hue}` in that order, written
    from their definitions: x/255, adjust, x255, clip to [0, 255] after each."""
    brightness, contrast, saturation, hue = (float(f) for f in factors)
    x = image.astype(np.float64) / 255.0
    x = np.clip(x + brightness, 0, 1)  # adjust_brightness: add delta
    mean = x.mean(axis=(0, 1), keepdims=True)  # adjust_contrast: per channel around the mean
    x = np.clip((x - mean) * contrast + mean, 0, 1)
    out = np.empty_like(x)
    for i, j in np.ndindex(x.shape[:2]):
        h, s, v = colorsys.rgb_to_hsv(*x[i, j])
        out[i, j] = colorsys.hsv_to_rgb(h, min(max(s * saturation, 0.0), 1.0), v)
    x = np.clip(out, 0, 1)
    for i, j in np.ndindex(x.shape[:2]):
        h, s, v = colorsys.rgb_to_hsv(*x[i, j])
        out[i, j] = colorsys.hsv_to_rgb((h + hue) % 1.0, s, v)
    return np.clip(out, 0, 1) * 255.0


def _photo(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (H, W, 3)).astype(np.uint8)


@pytest.mark.parametrize("seed", [(1, 2), (3, 4), (123, 9)])
def test_color_jitter_is_the_od_api_operations(seed):
    image = _photo(seed[0])[:6, :5]  # a few pixels: colorsys goes pixel by pixel
    seed = tf.constant(seed, tf.int32)
    got = color_jitter(tf.constant(image), seed).numpy()
    expected = _od_api_jitter(image, jitter_factors(seed).numpy())
    np.testing.assert_allclose(got, expected, atol=2e-3)  # float32 HSV round trips
    assert got.dtype == np.float32 and got.min() >= 0.0 and got.max() <= 255.0


def test_the_factors_cover_the_od_api_ranges():
    # 400 seeds: every factor inside its range, and spread over most of it
    factors = np.stack([jitter_factors(tf.constant([s, 7])).numpy() for s in range(400)])
    lows, highs = np.array([-0.2, 0.8, 0.8, -0.02]), np.array([0.2, 1.25, 1.25, 0.02])
    assert (factors >= lows).all() and (factors < highs).all()
    spread = (factors.max(0) - factors.min(0)) / (highs - lows)
    assert (spread > 0.9).all(), spread
    # the same seed, the same factors (a deterministic run jitters alike)
    np.testing.assert_array_equal(
        jitter_factors(tf.constant([5, 7])).numpy(), jitter_factors(tf.constant([5, 7])).numpy()
    )


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory):
    """8 noisy colour images with one box each, `BOX`."""
    folder = tmp_path_factory.mktemp("coco_jitter")
    with tf.io.TFRecordWriter(str(folder / "coco_train.record-00000-of-00001")) as writer:
        for i in range(1, 9):
            jpeg = io.BytesIO()
            Image.fromarray(_photo(i)).save(jpeg, "JPEG", quality=95)
            objects = (CocoObject(1, "a", BOX, False, 1.0),)
            writer.write(coco_example(CocoImage(i, f"{i}.jpg", H, W, objects), jpeg.getvalue()))
    return folder


def _batch(train_dir, augmentation: DetectionAugmentation):
    ds = coco.coco_dataset(
        train_dir, "train", batch_size=8, image_size=32, training=True, seed=3,
        shuffle_buffer=1, augmentation=augmentation,
    )  # fmt: skip
    images, targets = next(iter(ds))
    return images.numpy(), targets["boxes"].numpy()[:, 0]


def test_the_pipeline_jitters_colours_only_when_asked(train_dir):
    no_crop = {"crop_area_range": (1.0, 1.0), "crop_aspect_range": (W / H, W / H)}
    plain, plain_boxes = _batch(train_dir, DetectionAugmentation(**no_crop))
    jittered, boxes = _batch(train_dir, DetectionAugmentation(**no_crop, color_jitter=True))
    np.testing.assert_array_equal(boxes, plain_boxes)  # geometry untouched
    assert np.abs(jittered - plain).mean() > 2.0  # ignored, this would be 0
    assert jittered.min() >= 0.0 and jittered.max() <= 255.0
    again, _ = _batch(train_dir, DetectionAugmentation(**no_crop, color_jitter=True))
    np.testing.assert_array_equal(again, jittered)  # the seed decides


def test_the_flip_and_crop_knobs_reach_the_pipeline(train_dir):
    # no crop (the whole image is the only window of area 1 at the image's aspect ratio):
    # with the flip, some of 8 images come out mirrored ([.1, .5, .6, .9]); without, none
    no_crop = {"crop_area_range": (1.0, 1.0), "crop_aspect_range": (W / H, W / H)}
    mirrored = (BOX[0], 1 - BOX[3], BOX[2], 1 - BOX[1])
    _, flipped = _batch(train_dir, DetectionAugmentation(**no_crop))
    rows = {tuple(round(float(v), 4) for v in b) for b in flipped}
    assert rows == {BOX, tuple(round(v, 4) for v in mirrored)}
    _, kept = _batch(train_dir, DetectionAugmentation(**no_crop, flip=False))
    np.testing.assert_allclose(kept, np.tile(BOX, (8, 1)), atol=1e-6)
    # the default crop (area 0.75-1.0) moves the box in some images
    _, cropped = _batch(train_dir, DetectionAugmentation(flip=False))
    assert np.abs(cropped - np.array(BOX)).max() > 0.01


def test_the_recipe_knobs_make_the_tasks_augmentation():
    task = DetectionTask(TaskOptions(model="ssd320", image_size=128))
    assert task.train_options()["augmentation"] == DetectionAugmentation()  # SSD320 v1.2's
    recipe = get_recipe("ssd320_v1.2").with_overrides(
        {"detection.color_jitter": True, "detection.flip": False,
         "detection.crop_area_range": (0.5, 1.0)}, reason="test",
    )  # fmt: skip
    task = DetectionTask(TaskOptions(model="ssd320", image_size=128, recipe=recipe))
    assert task.train_options()["augmentation"] == DetectionAugmentation(
        flip=False, color_jitter=True, crop_area_range=(0.5, 1.0)
    )


def test_bad_settings_name_the_value():
    with pytest.raises(ValueError, match=r"crop_area_range must be .* got \(0.5, 1.5\)"):
        DetectionAugmentation(crop_area_range=(0.5, 1.5))
    with pytest.raises(ValueError, match=r"crop_aspect_range must be .* got \(2.0, 1.0\)"):
        DetectionAugmentation(crop_aspect_range=(2.0, 1.0))
    with pytest.raises(ValueError, match="crop_min_object_covered must be in"):
        DetectionAugmentation(crop_min_object_covered=1.5)
    with pytest.raises(ValueError, match="color_jitter must be a bool"):
        DetectionAugmentation(color_jitter="yes")
