"""ImageNet preprocessing units the recipe tests leave open: normalization in graph mode (how
the pipelines call it), GIF input, and the default output size."""

from __future__ import annotations

import numpy as np
import pytest
from imagenet_testdata import encode, smooth_image

NO_BOXES = np.zeros([0, 4], np.float32)


def _seed(tf, a, b=0):
    return tf.constant([a, b], tf.int64)


@pytest.mark.parametrize("shape", [None, [None, None, 3]])
def test_normalize_of_an_image_of_unknown_shape_in_graph_mode(tf, pp, shape):
    # The pipelines run the preprocessing traced without AutoGraph (`no_autograph`); an image
    # whose height and width (or rank) are unknown at tracing time gets the [3]-vector
    # broadcast: (x - mean) / std per channel, pixel 255 -> (255 - mean) / std.
    graph = tf.function(pp.normalize, input_signature=[tf.TensorSpec(shape)], autograph=False)
    out = graph(tf.fill([2, 3, 3], 255.0)).numpy()
    assert out.shape == (2, 3, 3)
    expected = [131.32 / 58.395, 138.72 / 57.12, 151.47 / 57.385]
    np.testing.assert_allclose(out, np.broadcast_to(expected, (2, 3, 3)), rtol=1e-6)


def test_gif_bytes_decode_to_the_first_frame_like_png(tf, pp):
    # Black left half, white right half: two colours, so GIF's palette keeps them exactly and
    # the GIF decodes to the PNG's pixels (one [h, w, 3] frame, not a [1, h, w, 3] animation).
    array = np.zeros((24, 32, 3), np.uint8)
    array[:, 16:] = 255
    gif, png = (tf.constant(encode(array, fmt)) for fmt in ("GIF", "PNG"))
    np.testing.assert_array_equal(
        pp.preprocess_for_eval(gif, image_size=16).numpy(),
        pp.preprocess_for_eval(png, image_size=16).numpy(),
    )
    train = [
        pp.preprocess_for_train(image, NO_BOXES, _seed(tf, 4), image_size=16).numpy()
        for image in (gif, png)
    ]
    np.testing.assert_array_equal(train[0], train[1])


def test_the_default_output_size_is_224(tf, pp):
    image = tf.constant(encode(smooth_image(12, 40, 56)))
    assert pp.preprocess_for_train(image, NO_BOXES, _seed(tf, 0)).shape == (224, 224, 3)
    assert pp.preprocess_for_eval(image).shape == (224, 224, 3)
    reference = pp.preprocess_for_train_reference(image, NO_BOXES, _seed(tf, 0))
    assert reference.shape == (224, 224, 3)


def test_bilinear_tf1_resize_of_a_2x2_image_in_both_directions(tf, pp):
    # TF1 bilinear (no half-pixel centres), 2 -> 4 on each axis: source coordinate
    # t * 2 / 4 = 0, 0.5, 1, 1.5 (clamped to 1). Rows [0, 10] and [20, 30] widen to
    # [0, 5, 10, 10] and [20, 25, 30, 30]; the rows in between are 0.5 of the way: [10, 15, 20,
    # 20]; the last is row 1 again.
    image = tf.constant([[[0.0], [10.0]], [[20.0], [30.0]]])
    out = pp.resize(image, [4, 4], "bilinear_tf1").numpy()[..., 0]
    assert out.tolist() == [[0, 5, 10, 10], [10, 15, 20, 20], [20, 25, 30, 30], [20, 25, 30, 30]]


def test_resize_shorter_side_is_the_size_exactly_for_every_side(tf, pp):
    # The shorter side is round(side * (size / side)) in float32: `size` itself (the error
    # of the two roundings is far below 0.5); the longer side round(long * (size / short))
    # in float32, numpy's the same IEEE arithmetic. Both orientations, sides 1..2999.
    f = np.float32
    for size in (256, 342):
        for short in range(1, 3000, 13):
            long = short * 3 + 1
            scale = f(size) / f(short)
            expected_long = int(np.round(f(long) * scale))
            for shape, want in (([short, long, 1], (size, expected_long)),
                                ([long, short, 1], (expected_long, size))):  # fmt: skip
                out = pp.resize_shorter_side(tf.zeros(shape, tf.uint8), size, "nearest")
                assert tuple(out.shape[:2]) == want, (shape, size)


@pytest.mark.parametrize("eval_crop", ["center_crop", "crop_then_resize"])
@pytest.mark.parametrize("method", ["bilinear", "bilinear_tf1"])
def test_eval_view_of_a_batch_is_each_images_view(tf, pp, eval_crop, method):
    # A serving export runs `eval_view` on a batch (one size): each image's view must equal
    # what the pipeline computes for that image alone, bit for bit. 45 x 37 at 16 px:
    # center_crop resizes to shorter side round(16 / 0.875) = 18 -> 22 x 18, crops 16;
    # crop_then_resize takes 0.875 of each side (offsets int(5.625 / 2) = 2, int(4.625 / 2) =
    # 2: 41 x 33), resizes to 16 x 16.
    p = pp.ImagePreprocessing(eval_crop=eval_crop, resize_method=method)
    images = np.random.default_rng(5).integers(0, 256, (3, 45, 37, 3), dtype=np.uint8)
    batch = pp.eval_view(tf.constant(images), image_size=16, preprocessing=p).numpy()
    assert batch.shape == (3, 16, 16, 3) and batch.dtype == np.float32
    for image, view in zip(images, batch, strict=True):
        alone = pp.eval_view(tf.constant(image), image_size=16, preprocessing=p).numpy()
        np.testing.assert_array_equal(view, alone)
    crop = pp.central_fraction_crop(tf.constant(images), 0.875)
    assert crop.shape == (3, 41, 33, 3)
    np.testing.assert_array_equal(crop.numpy(), images[:, 2:43, 2:35])
