"""The training example scaled where it is resized (`train_image(scaled=True)`, what
`TrainMap` yields) equals `scale_input` of the resized image bit for bit, in every recipe
the grain path runs; the resize's cached column tables (`_columns`) are read-only and shared
by the calls of one crop width."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cvbench.data.grain.augment import (
    _columns,
    random_crop_window,
    resize_bilinear,
    scale_input,
    train_image,
)
from cvbench.data.read.image_preprocessing import ImagePreprocessing

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic

RECIPES = {
    "default": ImagePreprocessing(),  # mean_std, bilinear
    "inception": ImagePreprocessing(input_scaling="inception"),
    "quantized": ImagePreprocessing(quantize_uint8=True),
    "tf1": ImagePreprocessing(resize_method="bilinear_tf1"),
    "tf1_inception": ImagePreprocessing.nvcnn_inception_v3(),
    "no_flip": ImagePreprocessing(flip=False),
}


@pytest.mark.parametrize("name", sorted(RECIPES))
@pytest.mark.parametrize(("shape", "size"), [((48, 64), 16), ((375, 500), 224), ((30, 20), 40)])
@pytest.mark.parametrize("given_out", [False, True])
def test_scaled_training_example_is_scale_input_of_the_resized_image(name, shape, size, given_out):
    p = RECIPES[name]
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    for _ in range(4):  # crops at other offsets and sizes, each flipped and not
        window = random_crop_window(*shape, rng=rng, preprocessing=p)
        for flip in (False, True):
            resized = train_image(image, image_size=size, window=window, flip=flip, preprocessing=p)
            expected = scale_input(resized, preprocessing=p)
            out = np.full((size, size, 3), np.nan, np.float32) if given_out else None
            got = train_image(
                image, image_size=size, window=window, flip=flip, preprocessing=p,
                out=out, scaled=True,
            )  # fmt: skip
            assert got.dtype == np.float32 and got.shape == (size, size, 3)
            assert np.array_equal(got, expected)
            if given_out:
                assert got is out


def test_scale_input_keeps_its_arithmetic():
    # "mean_std": x * (1 / std) + (-mean / std) in float32, per channel; at 255 and 0:
    # (255 * f32(1 / 58.395) + f32(-123.68 * f32(1 / 58.395)), ...) as float32 steps.
    f32 = np.float32
    p = ImagePreprocessing()
    image = np.stack([np.full((2, 3), 255.0, f32), np.zeros((2, 3), f32)])  # [2, 2, 3]
    scale = f32(1) / np.asarray(p.std, f32)
    offset = -np.asarray(p.mean, f32) * scale
    expected = np.stack([np.full((2, 3), f32(255) * scale + offset), np.tile(offset, (2, 1))])
    kept = image.copy()
    assert np.array_equal(scale_input(image), expected)
    assert np.array_equal(image, kept)  # not overwritten without `overwrite`
    assert scale_input(image, overwrite=True) is not None and np.array_equal(image, expected)
    strided = np.full((4, 4, 3), 255.0, f32)[::2, ::2]  # not contiguous: a new array
    assert np.array_equal(scale_input(strided, overwrite=True)[0, 0], expected[0, 0])
    assert np.all(strided == 255.0)


def test_column_tables_are_cached_read_only_and_match_the_weights():
    lo, hi, lerp = _columns(224, 300, half_pixel=True, start=0, count=224, flip=False, channels=3)
    again = _columns(224, 300, half_pixel=True, start=0, count=224, flip=False, channels=3)
    assert again[0] is lo and not any(a.flags.writeable for a in (lo, hi, lerp))
    # output column 0 of 300 -> 224: x = (0 + 0.5) * 300/224 - 0.5 = 0.1696..., so its left
    # pixel is 0 and its right pixel 1: flat columns 0, 1, 2 and 3, 4, 5, weight x
    assert lo[:3].tolist() == [0, 1, 2] and hi[:3].tolist() == [3, 4, 5]
    x = np.float32(0.5) * (np.float32(300) / np.float32(224)) - np.float32(0.5)
    assert lerp[:3].tolist() == [x] * 3
    # mirrored: output column 0 reads the window's last pixels, 299 then 298
    flo, fhi, _ = _columns(224, 300, half_pixel=True, start=0, count=224, flip=True, channels=3)
    assert flo[:3].tolist() == [897, 898, 899] and fhi[:3].tolist() == [894, 895, 896]


@pytest.mark.parametrize("left", [0, 5, 37])
def test_a_window_at_any_left_reads_its_own_columns(left):
    # The cached tables are for a window at column 0; the window's `left` shifts them.
    rng = np.random.default_rng(left)
    image = rng.integers(0, 256, (40, 80, 3), dtype=np.uint8)
    window = (3, left, 30, 40)
    crop = np.ascontiguousarray(image[3:33, left : left + 40])
    for flip in (False, True):
        got = resize_bilinear(image, (24, 24), window=window, flip=flip)
        assert np.array_equal(got, resize_bilinear(crop, (24, 24), flip=flip))


@pytest.mark.parametrize(
    ("window", "out_window", "named"),
    [
        ((0, 0, 40, 81), None, "window (0, 0, 40, 81)"),  # one column past the right edge
        ((1, 0, 40, 80), None, "window (1, 0, 40, 80)"),  # one row past the bottom
        ((0, -1, 10, 10), None, "window (0, -1, 10, 10)"),
        ((0, 0, 0, 10), None, "window (0, 0, 0, 10)"),  # empty
        (None, (0, 0, 24, 25), "out_window (0, 0, 24, 25)"),  # past the 24 x 24 result
        (None, (0, 3, 24, 0), "out_window (0, 3, 24, 0)"),
    ],
)
def test_a_window_not_inside_the_image_is_refused_naming_it(window, out_window, named):
    # The column gathers clip their indices (faster than checking each): a window outside
    # the image would otherwise be read clamped to its edge, not refused.
    image = np.zeros((40, 80, 3), np.uint8)
    with pytest.raises(ValueError, match=rf"^{re.escape(named)} \(top, left, height, width\)"):
        resize_bilinear(image, (24, 24), window=window, out_window=out_window)
    inside = resize_bilinear(image, (24, 24), window=(0, 0, 40, 80), out_window=(0, 0, 24, 24))
    assert inside.shape == (24, 24, 3)  # the largest boxes inside are accepted
