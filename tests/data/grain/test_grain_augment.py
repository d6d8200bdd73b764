"""`cvbench.data.grain.augment`: the recipe in NumPy against the tf.data path's TensorFlow ops.

Resizing and the evaluation view are compared bit for bit with `tf.image.resize` /
`preprocessing.eval_view`; the training crop's window sampling is compared as a distribution
(2,000 draws) with `tf.image.stateless_sample_distorted_bounding_box`, whose random stream
(Philox) this path does not reproduce.
"""

from __future__ import annotations

import numpy as np
import pytest

from cvbench.data.grain.augment import (
    decode_and_random_crop,
    eval_image,
    random_crop_window,
    resize_bilinear,
    scale_input,
    supported_preprocessing,
    train_image,
)
from cvbench.data.read.image_preprocessing import ImagePreprocessing

DRAWS = 2000
HEIGHT, WIDTH = 375, 500

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic


def _random_image(seed: int, height: int, width: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("method", ["bilinear", "bilinear_tf1"])
@pytest.mark.parametrize(
    ("shape", "size"), [((40, 56), (256, 358)), ((375, 500), (224, 224)), ((97, 333), (61, 7))]
)
def test_resize_is_tensorflows_bit_for_bit(tf, pp, shape, size, method):
    image = _random_image(1, *shape)
    expected = pp.resize(tf.cast(image, tf.float32), size, method).numpy()
    got = resize_bilinear(image, size, method=method)
    assert got.dtype == np.float32 and np.array_equal(got, expected)


def test_a_window_a_flip_and_an_output_window_are_index_arithmetic(tf, pp):
    image = _random_image(2, 60, 80)
    window = (5, 7, 41, 53)  # top, left, height, width
    crop = image[5:46, 7:60]
    flipped = resize_bilinear(image, (30, 30), window=window, flip=True)
    assert np.array_equal(flipped, pp.resize(tf.cast(crop[:, ::-1], tf.float32), [30, 30]))
    part = resize_bilinear(image, (64, 90), out_window=(3, 4, 10, 20))
    assert np.array_equal(part, resize_bilinear(image, (64, 90))[3:13, 4:24])


@pytest.mark.parametrize(
    "preprocessing",
    [ImagePreprocessing(), ImagePreprocessing.nvcnn_inception_v3()],
    ids=["center_crop", "crop_then_resize"],
)
@pytest.mark.parametrize("shape", [(40, 56), (375, 500), (500, 375), (257, 256), (301, 299)])
def test_eval_image_and_scaling_are_the_tf_data_paths_bit_for_bit(tf, pp, shape, preprocessing):
    image = _random_image(3, *shape)
    view = eval_image(image, image_size=224, preprocessing=preprocessing)
    expected = pp.eval_view(tf.constant(image), image_size=224, preprocessing=preprocessing)
    assert np.array_equal(view, expected.numpy())
    scaled = pp.scale_input(expected, preprocessing).numpy()
    assert np.array_equal(scale_input(view, preprocessing=preprocessing), scaled)


def _draws(preprocessing: ImagePreprocessing, boxes=None) -> np.ndarray:
    """`[area fraction, aspect ratio]` of DRAWS windows on a 375 x 500 image."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(DRAWS):
        _, _, h, w = random_crop_window(
            HEIGHT, WIDTH, boxes=boxes, rng=rng, preprocessing=preprocessing
        )
        out.append((h * w / (HEIGHT * WIDTH), w / h))
    return np.array(out)


def _tf_draws(tf, preprocessing: ImagePreprocessing) -> np.ndarray:
    out = []
    for i in range(DRAWS):
        _, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            [HEIGHT, WIDTH, 3],
            tf.zeros([1, 0, 4]),
            seed=[i, 0],
            min_object_covered=preprocessing.min_object_covered,
            aspect_ratio_range=preprocessing.aspect_ratio_range,
            area_range=preprocessing.area_range,
            max_attempts=preprocessing.max_attempts,
            use_image_if_no_bounding_boxes=True,
        )
        h, w = int(size[0]), int(size[1])
        out.append((h * w / (HEIGHT * WIDTH), w / h))
    return np.array(out)


@pytest.mark.parametrize(
    ("preprocessing", "area", "aspect"),
    [
        # min_object_covered 0.1 of the whole-image box raises the area floor 0.05 -> 0.1
        (ImagePreprocessing(), (0.1, 1.0), (0.75, 1.33)),
        (
            ImagePreprocessing(
                area_range=(0.3, 0.5), aspect_ratio_range=(1.0, 1.2), min_object_covered=0.0
            ),
            (0.3, 0.5),
            (1.0, 1.2),
        ),
    ],
    ids=["default", "narrow"],
)
def test_training_crops_lie_in_the_recipes_ranges_and_fill_them(preprocessing, area, aspect):
    draws = _draws(preprocessing)
    # width = round(height * ratio): the ratio of the rounded sides is off by < 0.5 / height
    slack = 0.5 / np.sqrt(area[0] * HEIGHT * WIDTH / aspect[1])
    assert draws[:, 0].min() >= area[0] and draws[:, 0].max() <= area[1]
    assert draws[:, 1].min() >= aspect[0] - slack and draws[:, 1].max() <= aspect[1] + slack
    # and they fill the ranges: each tenth of each range holds some draws
    for values, (lo, hi) in ((draws[:, 0], area), (draws[:, 1], aspect)):
        counts, _ = np.histogram(values, bins=10, range=(lo - 1e-9, hi + slack))
        assert counts.min() > 0, counts


def test_training_crops_are_distributed_as_tensorflows(tf):
    p = ImagePreprocessing()
    ours, theirs = _draws(p), _tf_draws(tf, p)
    # same sampling rule, other random streams: quantiles agree within sampling error
    # (2,000 draws: the standard error of a quartile of the area is ~0.006)
    for column in (0, 1):
        q_ours = np.quantile(ours[:, column], [0.1, 0.25, 0.5, 0.75, 0.9])
        q_theirs = np.quantile(theirs[:, column], [0.1, 0.25, 0.5, 0.75, 0.9])
        assert np.abs(q_ours - q_theirs).max() < 0.03, (column, q_ours, q_theirs)


def test_a_crop_covers_min_object_covered_of_a_box():
    # a box in the top-left quarter: every crop must cover >= 0.5 of it
    boxes = np.array([[0.0, 0.0, 0.5, 0.5]], np.float32)  # [ymin, xmin, ymax, xmax]
    p = ImagePreprocessing(min_object_covered=0.5)
    rng = np.random.default_rng(1)
    box_h, box_w = int(0.5 * HEIGHT), int(0.5 * WIDTH)
    for _ in range(300):
        top, left, h, w = random_crop_window(HEIGHT, WIDTH, boxes=boxes, rng=rng, preprocessing=p)
        inter = max(0, min(box_h, top + h) - top) * max(0, min(box_w, left + w) - left)
        assert inter / (box_h * box_w) >= 0.5


def test_a_flip_mirrors_the_crop_and_the_recipe_can_turn_it_off():
    image = _random_image(4, 30, 40)
    window = (0, 0, 30, 40)
    plain = train_image(image, image_size=16, window=window, flip=False)
    mirrored = train_image(image, image_size=16, window=window, flip=True)
    assert np.array_equal(mirrored, resize_bilinear(image[:, ::-1], (16, 16)))
    assert not np.array_equal(plain, mirrored)
    off = ImagePreprocessing(flip=False)
    assert np.array_equal(
        train_image(image, image_size=16, window=window, flip=True, preprocessing=off), plain
    )


def test_a_resize_method_this_path_lacks_is_refused():
    with pytest.raises(ValueError, match="resizes with bilinear or bilinear_tf1 only, got resize_"):
        supported_preprocessing(ImagePreprocessing(resize_method="bicubic"))


def test_scaled_decoding_keeps_the_crops_and_nearly_the_pixels():
    from grain_records import photo
    from imagenet_testdata import encode

    data = encode(photo(5, 600, 800), quality=90)
    scaled_draws = 0
    for seed in range(40):
        full, window = decode_and_random_crop(data, image_size=64, rng=np.random.default_rng(seed))
        small, small_window = decode_and_random_crop(
            data, image_size=64, rng=np.random.default_rng(seed), scaled=True
        )
        assert full.shape == (600, 800, 3)
        if small.shape == full.shape:  # crop under 2 x 64 on a side: decoded at full size
            assert small_window == window
            continue
        scaled_draws += 1
        # the window maps onto the smaller image: same place and size, up to rounding
        f = small.shape[0] / 600
        assert abs(small_window[0] - window[0] * f) <= 1
        assert abs(small_window[2] - window[2] * f) <= 1
        assert min(small_window[2], small_window[3]) >= 64
        a = train_image(full, image_size=64, window=window, flip=False)
        b = train_image(small, image_size=64, window=small_window, flip=False)
        # the DCT-domain scaling averages where the full-size resize samples: the noise of
        # the photo differs, not the picture (mean difference a few levels of 255)
        assert np.abs(a - b).mean() < 8, np.abs(a - b).mean()
    assert scaled_draws > 20
