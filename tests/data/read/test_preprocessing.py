"""ImageNet preprocessing: normalization constants, crop windows, fused vs unfused decoding,
evaluation resize and crop, output shapes and value ranges."""

from __future__ import annotations

import numpy as np
from imagenet_testdata import encode, smooth_image

# Pixels 0..255 normalize to [(0 - 123.68) / 58.395, (255 - 103.53) / 57.385]: the smallest
# value is channel R at 0, the largest channel B at 255.
LOWEST = (0 - 123.68) / 58.395  # -2.1180
HIGHEST = (255 - 103.53) / 57.385  # 2.6395


def _seed(tf, a, b=0):
    return tf.constant([a, b], tf.int64)


def test_normalize_exact_values(tf, pp):
    pixels = tf.constant([[[0, 0, 0], [255, 255, 255], [123.68, 116.28, 103.53]]])
    out = pp.normalize(pixels).numpy()
    np.testing.assert_allclose(
        out[0, 0], [-123.68 / 58.395, -116.28 / 57.12, -103.53 / 57.385], rtol=1e-6
    )
    np.testing.assert_allclose(
        out[0, 1], [131.32 / 58.395, 138.72 / 57.12, 151.47 / 57.385], rtol=1e-6
    )
    np.testing.assert_allclose(out[0, 2], [0, 0, 0], atol=1e-6)
    assert pp.normalize(pixels, tf.bfloat16).dtype == tf.bfloat16
    # An image of unknown shape takes the broadcasting path: same values.
    dynamic = tf.function(pp.normalize, input_signature=[tf.TensorSpec(None, tf.float32)])
    np.testing.assert_allclose(dynamic(pixels).numpy(), out, rtol=1e-6)


def test_random_crop_window_respects_the_recipe_ranges(tf, pp):
    shape = tf.constant([375, 500, 3])
    no_boxes = tf.zeros([0, 4])
    areas, aspects = [], []
    for s in range(200):
        y, x, h, w = pp.random_crop_window(shape, no_boxes, _seed(tf, s)).numpy()
        assert min(y, x) >= 0 and y + h <= 375 and x + w <= 500
        areas.append(h * w / (375 * 500))
        aspects.append(w / h)
    # area_range (0.05, 1.0) and aspect_ratio_range (0.75, 1.33), up to pixel rounding; after
    # 100 failed attempts the whole image is used (aspect 500 / 375 = 1.333).
    assert min(areas) >= 0.045 and max(areas) <= 1.0
    assert min(aspects) >= 0.74 and max(aspects) <= 1.34
    assert len({round(a, 3) for a in areas}) > 100  # varied, not one fixed window


def test_crop_window_covers_at_least_a_tenth_of_the_box(tf, pp):
    # Box: normalized [ymin, xmin, ymax, xmax] = rows 100..200, columns 100..300 of 375 x 500.
    box = tf.constant([[100 / 375, 100 / 500, 200 / 375, 300 / 500]])
    box_area = 100 * 200
    for s in range(50):
        y, x, h, w = pp.random_crop_window(tf.constant([375, 500, 3]), box, _seed(tf, s)).numpy()
        inter_h = max(0, min(y + h, 200) - max(y, 100))
        inter_w = max(0, min(x + w, 300) - max(x, 100))
        assert inter_h * inter_w >= 0.1 * box_area - 500  # min_object_covered=0.1, rounding


def test_fused_and_unfused_decoding_give_the_same_crop(tf, pp):
    image = encode(smooth_image(7, 120, 160), quality=95)
    for s in range(5):
        fused = pp.decode_and_random_crop(tf.constant(image), tf.zeros([0, 4]), _seed(tf, s))
        whole = pp.decode_then_random_crop(tf.constant(image), tf.zeros([0, 4]), _seed(tf, s))
        assert fused.shape == whole.shape and fused.dtype == tf.uint8
        # libjpeg upsamples chroma differently at the crop border, so pixels differ slightly.
        diff = np.abs(fused.numpy().astype(int) - whole.numpy().astype(int))
        assert diff.mean() < 2.0
        # NVIDIA's decoder options reach both paths: the same crop, decoded slightly
        # differently from the default (integer IDCT, chroma not interpolated).
        opts = pp.NVIDIA_JPEG_OPTIONS
        fused_nv = pp.decode_and_random_crop(
            tf.constant(image), tf.zeros([0, 4]), _seed(tf, s), **opts
        )
        whole_nv = pp.decode_then_random_crop(
            tf.constant(image), tf.zeros([0, 4]), _seed(tf, s), **opts
        )
        assert fused_nv.shape == fused.shape == whole_nv.shape
        assert np.abs(fused_nv.numpy().astype(int) - whole_nv.numpy().astype(int)).mean() < 2.0
        assert not np.array_equal(whole_nv.numpy(), whole.numpy())


def test_train_output_shape_range_and_determinism(tf, pp):
    image = tf.constant(encode(smooth_image(8, 120, 160)))
    boxes = tf.zeros([0, 4])
    a = pp.preprocess_for_train(image, boxes, _seed(tf, 1), image_size=64)
    b = pp.preprocess_for_train(image, boxes, _seed(tf, 1), image_size=64)
    c = pp.preprocess_for_train(image, boxes, _seed(tf, 2), image_size=64)
    assert a.shape == (64, 64, 3) and a.dtype == tf.float32
    assert float(tf.reduce_min(a)) >= LOWEST - 1e-5
    assert float(tf.reduce_max(a)) <= HIGHEST + 1e-5
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())
    bf16 = pp.preprocess_for_train(image, boxes, _seed(tf, 1), image_size=64, dtype=tf.bfloat16)
    assert bf16.dtype == tf.bfloat16


def test_train_flip_is_a_left_right_mirror(tf, pp):
    # With a fixed crop seed, two flip seeds give either the same image or its mirror.
    image = tf.constant(encode(smooth_image(9, 64, 64), quality=100))
    outs = [
        pp._train_from_crop(tf.io.decode_jpeg(image), _seed(tf, s), 64, tf.float32).numpy()
        for s in range(8)
    ]
    plain = [o for o in outs if np.array_equal(o, outs[0])]
    mirrored = [o for o in outs if np.array_equal(o, outs[0][:, ::-1])]
    assert len(plain) + len(mirrored) == 8 and plain and mirrored


def test_train_flip_before_resize_matches_flip_after(tf, pp):
    # The crop is mirrored before the bilinear resize; with half-pixel centres that equals
    # mirroring the resized image, up to float rounding (well under 0.01 of a pixel level,
    # i.e. 0.01 / 57 after normalization).
    crop = tf.io.decode_jpeg(tf.constant(encode(smooth_image(11, 90, 70), quality=100)))
    resized = pp.normalize(tf.image.resize(crop, [48, 48], method="bilinear")).numpy()
    outs = [pp._train_from_crop(crop, _seed(tf, s), 48, tf.float32).numpy() for s in range(8)]
    plain = [o for o in outs if np.abs(o - resized).max() < 0.01 / 57]
    mirrored = [o for o in outs if np.abs(o - resized[:, ::-1]).max() < 0.01 / 57]
    assert len(plain) + len(mirrored) == 8 and plain and mirrored


def test_png_bytes_take_the_unfused_path(tf, pp):
    png = tf.constant(encode(smooth_image(10, 48, 64), "PNG"))
    out = pp.preprocess_for_train(png, tf.zeros([0, 4]), _seed(tf, 3), image_size=32)
    assert out.shape == (32, 32, 3)


def test_resize_shorter_side_and_central_crop(tf, pp):
    assert pp.eval_resize_size(224) == 256  # 224 / 0.875
    assert pp.eval_resize_size(299) == 342  # 299 / 0.875 = 341.7
    resized = pp.resize_shorter_side(tf.zeros([375, 500, 3]), 256)
    assert resized.shape == (256, 341, 3)  # 500 * 256 / 375 = 341.33
    assert pp.resize_shorter_side(tf.zeros([500, 375, 3]), 256).shape == (341, 256, 3)
    # A 4 x 6 ramp: the central 2 x 2 crop starts at row (4 - 2) // 2 = 1, column 2.
    ramp = tf.reshape(tf.range(24), [4, 6, 1])
    np.testing.assert_array_equal(pp.central_crop(ramp, 2).numpy()[..., 0], [[8, 9], [14, 15]])


def test_eval_output_shape_and_range(tf, pp):
    for shape in [(40, 56), (56, 40), (300, 300)]:
        image = tf.constant(encode(smooth_image(11, *shape)))
        out = pp.preprocess_for_eval(image, image_size=32)
        assert out.shape == (32, 32, 3)
        assert LOWEST - 1e-5 <= float(tf.reduce_min(out)) <= float(tf.reduce_max(out))
        assert float(tf.reduce_max(out)) <= HIGHEST + 1e-5


def test_eval_crop_is_the_center_of_the_resized_image(tf, pp):
    # A 64 x 64 image whose left half is black and right half white: after resizing to
    # 64 / 0.875 = 73 and cropping the central 64, the crop is still half black, half white.
    array = np.zeros((64, 64, 3), np.uint8)
    array[:, 32:] = 255
    out = pp.preprocess_for_eval(tf.constant(encode(array, "PNG")), image_size=64).numpy()
    np.testing.assert_allclose(out[:, :30, 0], LOWEST, atol=1e-4)
    np.testing.assert_allclose(out[:, 34:, 2], HIGHEST, atol=1e-4)
