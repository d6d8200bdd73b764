"""Inputs of the inference API: every kind, the resize rules and their geometry, errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from inference_models import classifier_info, detector_info
from PIL import Image

from cvbench.data.image_io import ImageError
from cvbench.inference.images import (
    Geometry,
    center_crop_geometry,
    central_crop_window,
    iter_batches,
    iter_images,
    read_image,
    resize_image,
)

pytestmark = pytest.mark.backend_agnostic


def _png(path, height, width, value=0):
    Image.fromarray(np.full((height, width, 3), value, np.uint8)).save(path)
    return path


def test_center_crop_geometry_square_input():
    # 375 x 500 at 224 / 0.875: shorter side to round(224 / 0.875) = 256, longer side
    # round(500 * 256 / 375) = round(341.33) = 341; crop offsets (256-224)//2 = 16,
    # (341-224)//2 = 58 (as cvbench.data.read.preprocessing's resize_shorter_side + central_crop).
    assert center_crop_geometry(375, 500, image_size=(224, 224), crop_fraction=0.875) == (
        (256, 341),
        (16, 58),
    )
    # A portrait image: the width is the shorter side.
    assert center_crop_geometry(500, 375, image_size=(224, 224), crop_fraction=0.875) == (
        (341, 256),
        (58, 16),
    )


def test_center_crop_geometry_small_and_non_square_targets():
    # Upscaling: 10 x 20 to cover 32 (16 / 0.5): scale 3.2 -> 32 x 64, offsets 8, 24.
    assert center_crop_geometry(10, 20, image_size=(16, 16), crop_fraction=0.5) == (
        (32, 64),
        (8, 24),
    )
    # A (16, 32) target at 1.0 from 20 x 20: scale max(16/20, 32/20) = 1.6 -> 32 x 32,
    # offsets (32-16)//2 = 8 and 0.
    assert center_crop_geometry(20, 20, image_size=(16, 32), crop_fraction=1.0) == (
        (32, 32),
        (8, 0),
    )


def test_center_crop_takes_the_middle_columns():
    # 8 x 24 at (8, 8), crop fraction 1: no resize (scale max(8/8, 8/24) = 1), crop columns
    # 8..15: exactly the green middle third.
    image = np.zeros((8, 24, 3), np.uint8)
    image[:, :8, 0] = image[:, 16:, 0] = 255
    image[:, 8:16, 1] = 200
    out, geometry = resize_image(image, classifier_info())
    assert out.dtype == np.float32 and out.shape == (8, 8, 3)
    np.testing.assert_array_equal(out[..., 1], 200.0)
    np.testing.assert_array_equal(out[..., 0], 0.0)
    assert geometry == Geometry((8, 24), (1.0, 1.0), (0, 8))


@pytest.mark.parametrize("shape, fraction", [((40, 50), 0.5), ((375, 500), 0.875), ((7, 9), 1.0),
                                             ((299, 299), 0.875), ((3, 5), 0.8)])  # fmt: skip
def test_central_crop_window_is_tf_image_central_crop(shape, fraction):
    import tensorflow as tf  # the reference only; the rule itself is numpy

    h, w = shape
    index = np.arange(h * w, dtype=np.float32).reshape(h, w, 1)
    crop = tf.image.central_crop(index, fraction).numpy()
    (top, left), (ch, cw) = central_crop_window(h, w, fraction)
    assert crop.shape[:2] == (ch, cw)
    assert crop[0, 0, 0] == top * w + left  # its first pixel is the window's corner


def test_crop_then_resize_crops_then_resizes_and_maps_boxes_back():
    # 40 x 50, fraction 0.5: top int((40 - 20) / 2) = 10, left int((50 - 25) / 2) = 12, a
    # 20 x 26 window; resized to 10 x 13: scale 0.5 both ways, offset (10, 12) x 0.5.
    image = np.zeros((40, 50, 3), np.uint8)
    image[10:30, 12:38] = 90  # exactly the window
    info = dataclasses.replace(classifier_info(), image_size=(10, 13), resize="crop_then_resize",
                               crop_fraction=0.5)  # fmt: skip
    out, geometry = resize_image(image, info)
    assert out.shape == (10, 13, 3)
    np.testing.assert_array_equal(out, 90.0)
    assert geometry == Geometry((40, 50), (0.5, 0.5), (5.0, 6.0))
    np.testing.assert_allclose(geometry.to_original(np.array([0, 0, 10, 13])), [10, 12, 30, 38])


def test_stretch_keeps_an_image_of_the_input_size_unchanged():
    image = np.random.default_rng(0).uniform(0, 255, (64, 64, 3)).astype(np.float32)
    out, geometry = resize_image(image, detector_info())
    np.testing.assert_array_equal(out, image)
    assert geometry == Geometry((64, 64), (1.0, 1.0), (0, 0))


def test_stretch_resizes_each_axis_and_maps_boxes_back():
    out, geometry = resize_image(np.full((100, 200, 3), 7, np.uint8), detector_info())
    assert out.shape == (64, 64, 3)
    np.testing.assert_allclose(out, 7.0, atol=1e-4)  # bilinear of a constant is the constant
    assert geometry.scale == (0.64, 0.32)
    # Model pixels [16, 16, 32, 48] -> [16/0.64, 16/0.32, 32/0.64, 48/0.32] = [25, 50, 50, 150].
    boxes = geometry.to_original(np.array([[16, 16, 32, 48]]))
    np.testing.assert_allclose(boxes, [[25, 50, 50, 150]])


def test_center_crop_boxes_map_through_the_crop_and_clip():
    # 10 x 20 at (16, 16) / 0.5 (see above): scale 3.2, offsets (8, 24). Model box
    # [0, 0, 16, 16] -> [(0+8)/3.2, (0+24)/3.2, (16+8)/3.2, (16+24)/3.2] = [2.5, 7.5, 7.5, 12.5];
    # a box reaching past the model input is clipped to the original 10 x 20.
    info = dataclasses.replace(classifier_info(crop_fraction=0.5), image_size=(16, 16))
    _, geometry = resize_image(np.zeros((10, 20, 3)), info)
    boxes = geometry.to_original(np.array([[0, 0, 16, 16], [-100, -100, 1000, 1000]]))
    np.testing.assert_allclose(boxes, [[2.5, 7.5, 7.5, 12.5], [0, 0, 10, 20]])


def test_folder_sorted_image_extensions_only(tmp_path):
    _png(tmp_path / "b.png", 4, 5)
    _png(tmp_path / "a.PNG", 6, 7)
    Image.fromarray(np.zeros((3, 3, 3), np.uint8)).save(tmp_path / "c.jpg")
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "sub").mkdir()
    _png(tmp_path / "sub" / "d.png", 2, 2)  # not recursive
    found = [(s, img.shape) for s, img in iter_images(tmp_path)]
    assert found == [
        (str(tmp_path / "a.PNG"), (6, 7, 3)),
        (str(tmp_path / "b.png"), (4, 5, 3)),
        (str(tmp_path / "c.jpg"), (3, 3, 3)),
    ]


def test_paths_and_folders_in_order(tmp_path):
    one = _png(tmp_path / "one.png", 4, 4, 10)
    (tmp_path / "f").mkdir()
    two = _png(tmp_path / "f" / "two.png", 4, 4, 20)
    sources = [s for s, _ in iter_images([tmp_path / "f", str(one)])]
    assert sources == [str(two), str(one)]


def test_arrays_batches_and_lists_are_indexed():
    batch = np.zeros((3, 5, 6, 3), np.uint8)
    assert [(s, i.shape) for s, i in iter_images(batch)] == [(k, (5, 6, 3)) for k in range(3)]
    assert [s for s, _ in iter_images(np.zeros((5, 6, 3)))] == [0]
    mixed = [np.zeros((5, 6, 3)), np.ones((7, 2, 3))]
    assert [(s, i.shape) for s, i in iter_images(mixed)] == [(0, (5, 6, 3)), (1, (7, 2, 3))]


def test_tf_data_dataset_of_images_batches_tuples_and_dicts():
    import tensorflow as tf

    images = np.arange(2 * 4 * 4 * 3, dtype=np.float32).reshape(2, 4, 4, 3)
    for dataset in (
        tf.data.Dataset.from_tensor_slices(images),
        tf.data.Dataset.from_tensor_slices(images).batch(2),
        tf.data.Dataset.from_tensor_slices((images, [0, 1])),
        tf.data.Dataset.from_tensor_slices({"image": images, "label": [0, 1]}),
    ):
        got = list(iter_images(dataset))
        assert [s for s, _ in got] == [0, 1]
        np.testing.assert_array_equal(np.stack([i for _, i in got]), images)


def test_modes_become_rgb(tmp_path):
    gray = tmp_path / "gray.png"
    Image.fromarray(np.full((2, 3), 90, np.uint8), mode="L").save(gray)
    np.testing.assert_array_equal(read_image(gray), np.full((2, 3, 3), 90))
    clear = tmp_path / "clear.png"
    Image.new("RGBA", (3, 2), (10, 20, 30, 0)).save(clear)  # fully transparent over white
    np.testing.assert_array_equal(read_image(clear), np.full((2, 3, 3), 255))


def test_batches_keep_order_and_the_last_one_is_short():
    batch = np.zeros((5, 64, 64, 3), np.float32)
    batches = list(iter_batches(batch, detector_info(), batch_size=2))
    assert [b.sources for b in batches] == [(0, 1), (2, 3), (4,)]
    assert batches[-1].images.shape == (1, 64, 64, 3)


def test_errors_name_the_file_or_value(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"this is not a jpeg")
    with pytest.raises(ImageError, match=r"bad\.jpg: not an image"):
        list(iter_images(bad))
    with pytest.raises(FileNotFoundError, match="missing.png"):
        list(iter_images(tmp_path / "missing.png"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no image files"):
        list(iter_images(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        list(iter_images(np.zeros((2, 3))))
    with pytest.raises(ValueError, match="got int 3"):
        list(iter_images(3))
    with pytest.raises(ValueError, match="got 0"):
        list(iter_batches(np.zeros((1, 8, 8, 3)), classifier_info(), batch_size=0))
    with pytest.raises(ValueError, match=r"\(8, 8, 4\)"):
        resize_image(np.zeros((8, 8, 4)), classifier_info())
