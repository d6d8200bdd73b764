import collections

import numpy as np
import pytest

from cvbench.demo.shapes import (
    SHAPE_NAMES,
    classification_example,
    detection_example,
    place_shape,
    render,
)


def test_place_shape_box_and_area_are_exact():
    # A square's unit polygon is (+-0.85, +-0.85); size 40 scales it by 20, so the box is
    # 34 px wide centred on (50, 30): x from 50 - 17 = 33, y from 30 - 17 = 13.
    s = place_shape(1, center=(50.0, 30.0), size=40.0, angle_deg=0.0, colour="red")
    np.testing.assert_allclose(s.bbox, (33.0, 13.0, 34.0, 34.0), atol=1e-9)
    assert s.area == pytest.approx(34.0 * 34.0)
    # The diamond's unit polygon spans x in +-0.8, y in +-1: area 2 * 0.8 * 1 = 1.6 unit^2,
    # scaled by (40 / 2)^2 = 400 -> 640 px^2.
    d = place_shape(4, center=(50.0, 50.0), size=40.0, angle_deg=0.0, colour="red")
    assert d.area == pytest.approx(640.0)


def test_rotation_grows_the_square_box():
    # Rotating by 15 degrees: half-extent 0.85 * (cos 15 + sin 15) = 0.85 * 1.2247 = 1.0410.
    s = place_shape(1, center=(0.0, 0.0), size=2.0, angle_deg=15.0, colour="red")
    assert s.bbox[2] == pytest.approx(2 * 0.85 * (np.cos(np.pi / 12) + np.sin(np.pi / 12)))


@pytest.mark.parametrize("label", range(len(SHAPE_NAMES)))
def test_drawn_pixels_fill_their_box(label):
    # Same seed, no noise: the two renders share the background, so the pixels that differ
    # are exactly the shape's. They must lie inside its box (1 px of anti-aliasing slack)
    # and reach each side of it.
    shape = place_shape(label, center=(30.3, 33.7), size=36.0, angle_deg=10.0, colour="yellow")
    with_shape = render(np.random.default_rng(3), 64, [shape], noise_std=0.0)
    without = render(np.random.default_rng(3), 64, [], noise_std=0.0)
    ys, xs = np.nonzero(np.abs(with_shape.astype(int) - without.astype(int)).sum(axis=-1) > 30)
    x, y, w, h = shape.bbox
    assert xs.min() >= np.floor(x) - 1 and xs.max() <= np.ceil(x + w)
    assert ys.min() >= np.floor(y) - 1 and ys.max() <= np.ceil(y + h)
    assert xs.min() <= x + 1.5 and xs.max() >= x + w - 2.5
    assert ys.min() <= y + 1.5 and ys.max() >= y + h - 2.5


def test_render_is_deterministic_and_seed_dependent():
    a, _ = classification_example(np.random.default_rng(7), 2, 32)
    b, _ = classification_example(np.random.default_rng(7), 2, 32)
    c, _ = classification_example(np.random.default_rng(8), 2, 32)
    assert a.dtype == np.uint8 and a.shape == (32, 32, 3)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a.astype(int) - c.astype(int)).mean() > 5


def test_classification_shape_is_dominant_and_inside():
    for i in range(50):
        _, s = classification_example(np.random.default_rng(i), i % 6, 64)
        x, y, w, h = s.bbox
        assert s.label == i % 6
        assert x >= 0 and y >= 0 and x + w <= 64 and y + h <= 64
        assert max(w, h) >= 0.45 * 0.8 * 64  # the smallest unit extent (diamond) is 0.8


def test_detection_boxes_inside_and_barely_overlapping():
    counts = collections.Counter()
    labels = collections.Counter()
    for i in range(300):
        image, shapes = detection_example(np.random.default_rng(i), 96, max_objects=4)
        assert image.shape == (96, 96, 3)
        counts[len(shapes)] += 1
        for j, s in enumerate(shapes):
            labels[s.label] += 1
            x, y, w, h = s.bbox
            assert x >= 0 and y >= 0 and x + w <= 96 and y + h <= 96
            assert 0.2 * 0.8 * 96 <= max(w, h) <= 0.5 * 1.05 * 96
            for t in shapes[j + 1 :]:
                ix = max(0, min(x + w, t.bbox[0] + t.bbox[2]) - max(x, t.bbox[0]))
                iy = max(0, min(y + h, t.bbox[1] + t.bbox[3]) - max(y, t.bbox[1]))
                assert ix * iy / (w * h + t.bbox[2] * t.bbox[3] - ix * iy) <= 0.1 + 1e-9
    assert set(counts) <= {1, 2, 3, 4} and counts[4] > 30
    # About 750 shapes over 6 classes: 125 each, binomial std ~10; allow +-40%.
    total = sum(labels.values())
    assert sorted(labels) == list(range(6))
    for n in labels.values():
        assert 0.6 * total / 6 < n < 1.4 * total / 6


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="hexagon"):
        place_shape(0, center=(0, 0), size=1, angle_deg=0, colour="hexagon")
    with pytest.raises(ValueError, match="7"):
        place_shape(7, center=(0, 0), size=1, angle_deg=0, colour="red")
    with pytest.raises(ValueError, match="-2"):
        place_shape(0, center=(0, 0), size=-2, angle_deg=0, colour="red")
    with pytest.raises(ValueError, match="max_objects"):
        detection_example(np.random.default_rng(0), 64, max_objects=0)
    with pytest.raises(ValueError, match="0.9"):
        detection_example(np.random.default_rng(0), 64, min_size=0.9, max_size=0.5)
