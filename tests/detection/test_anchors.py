"""Multiscale anchors against the TF OD API rule (MultiscaleGridAnchorGenerator)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cvbench.detection.anchors import (
    anchors_per_location,
    feature_map_sizes,
    image_hw,
    multiscale_anchors,
)

pytestmark = pytest.mark.backend_agnostic

S2 = math.sqrt(2.0)


def test_count_and_level_blocks_at_320():
    # ceil(320 / 2^l) for l = 3..7: 40, 20, 10, 5, 3 -> 1600 + 400 + 100 + 25 + 9 = 2134
    # locations, 6 anchors each (3 aspect ratios x 2 octave scales) = 12,804.
    assert feature_map_sizes(320) == [(40, 40), (20, 20), (10, 10), (5, 5), (3, 3)]
    anchors = multiscale_anchors(320)
    assert anchors.shape == (12804, 4) and anchors.dtype == np.float32


def test_exact_values_at_320():
    a = multiscale_anchors(320) * 320.0  # pixels
    # Level 3: stride 8, 320 % 8 == 0 -> centre offset 4; base 4 * 8 = 32.
    # Anchor 0: cell (0, 0), aspect 1, scale 1: centre (4, 4), 32 x 32.
    np.testing.assert_allclose(a[0], [-12, -12, 20, 20], atol=1e-4)
    # Anchor 1: aspect 1, scale 2^0.5: side 32 * sqrt(2).
    h = 16 * S2
    np.testing.assert_allclose(a[1], [4 - h, 4 - h, 4 + h, 4 + h], atol=1e-4)
    # Anchor 2: aspect 2 (w / h), scale 1: h = 32 / sqrt(2), w = 32 * sqrt(2).
    np.testing.assert_allclose(a[2], [4 - 8 * S2, 4 - 16 * S2, 4 + 8 * S2, 4 + 16 * S2], atol=1e-4)
    # Anchor 4: aspect 0.5, scale 1: h = 32 * sqrt(2), w = 32 / sqrt(2).
    np.testing.assert_allclose(a[4], [4 - 16 * S2, 4 - 8 * S2, 4 + 16 * S2, 4 + 8 * S2], atol=1e-4)
    # Anchor 6: next location to the right, cell (0, 1): centre x = 8 + 4 = 12.
    np.testing.assert_allclose(a[6], [-12, -4, 20, 28], atol=1e-4)
    # Anchor 40 * 6 = 240: cell (1, 0), centre (12, 4): rows are the outer loop.
    np.testing.assert_allclose(a[240], [-4, -12, 28, 20], atol=1e-4)
    # Level 6 starts after 6 * (1600 + 400 + 100) = 12,600: stride 64, 320 % 64 == 0 ->
    # offset 32, base 256: [32 - 128, ..., 32 + 128].
    np.testing.assert_allclose(a[12600], [-96, -96, 160, 160], atol=1e-4)
    # Level 7 starts at 12,600 + 6 * 25 = 12,750: stride 128, 320 % 128 = 64 != 0 -> offset 0
    # (the OD API rule), base 512: centred on (0, 0).
    np.testing.assert_allclose(a[12750], [-256, -256, 256, 256], atol=1e-4)
    # Last anchor: cell (2, 2) of level 7, centre (256, 256), aspect 0.5, scale sqrt(2):
    # h = 512 * sqrt(2) / sqrt(0.5) = 1024, w = 512 * sqrt(2) * sqrt(0.5) = 512.
    np.testing.assert_allclose(a[-1], [-256, 0, 768, 512], atol=1e-4)


def test_exact_values_at_300_no_offsets():
    # 300 is divisible by none of 8..128 (300 % 8 = 4): every centre offset is 0.
    # Sizes ceil(300 / 2^l): 38, 19, 10, 5, 3 -> (1444 + 361 + 100 + 25 + 9) * 6 = 11,634.
    assert feature_map_sizes(300) == [(38, 38), (19, 19), (10, 10), (5, 5), (3, 3)]
    a = multiscale_anchors(300)
    assert a.shape == (11634, 4)
    a = a * 300.0
    np.testing.assert_allclose(a[0], [-16, -16, 16, 16], atol=1e-4)  # centre (0, 0), side 32
    # Level 4 starts at 6 * 1444 = 8664: stride 16, base 64, centre (0, 0).
    np.testing.assert_allclose(a[8664], [-32, -32, 32, 32], atol=1e-4)
    # Its last cell (18, 18): centre (288, 288), aspect 0.5, scale sqrt(2): h = 128, w = 64.
    np.testing.assert_allclose(a[8664 + 6 * 361 - 1], [224, 256, 352, 320], atol=1e-4)


def test_non_square_size_not_multiple_of_128():
    # H = 192 (divisible by 8..64, not 128), W = 200 (divisible by 8 only).
    # Heights ceil(192 / 2^l): 24, 12, 6, 3, 2; widths ceil(200 / 2^l): 25, 13, 7, 4, 2.
    sizes = feature_map_sizes((192, 200))
    assert sizes == [(24, 25), (12, 13), (6, 7), (3, 4), (2, 2)]
    a = multiscale_anchors((192, 200))
    assert a.shape == ((600 + 156 + 42 + 12 + 4) * 6, 4)  # 4884
    # Level 3, first anchor: y offset 4 (192 % 8 == 0), x offset 4 (200 % 8 == 0).
    np.testing.assert_allclose(a[0] * [192, 200, 192, 200], [-12, -12, 20, 20], atol=1e-4)
    # Level 4 (start 6 * 600 = 3600): stride 16, y offset 8 (192 % 16 == 0), x offset 0
    # (200 % 16 = 8), base 64.
    np.testing.assert_allclose(a[3600] * [192, 200, 192, 200], [-24, -32, 40, 32], atol=1e-4)
    # Level 7 (start 6 * (600 + 156 + 42 + 12) = 4860): stride 128, no offsets, base 512;
    # cell (1, 1) (4th location) aspect 1 scale 1 at centre (128, 128).
    np.testing.assert_allclose(
        a[4860 + 6 * 3] * [192, 200, 192, 200], [-128, -128, 384, 384], atol=1e-4
    )


def test_aspect_ratio_major_scale_minor_within_a_location():
    a = multiscale_anchors(256, aspect_ratios=(1.0, 2.0, 0.5), scales_per_octave=2)[:6]
    h, w = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    np.testing.assert_allclose(w / h, [1, 1, 2, 2, 0.5, 0.5], rtol=1e-5)
    np.testing.assert_allclose(np.sqrt(h * w) * 256, [32, 32 * S2] * 3, rtol=1e-5)


def test_other_parameters():
    a = multiscale_anchors(64, min_level=5, max_level=6, anchor_scale=1.0, aspect_ratios=(1.0,),
                           scales_per_octave=1)  # fmt: skip
    # Level 5: 2 x 2 cells of 32, offset 16, side 32; level 6: 1 cell, offset 32, side 64.
    expected = [[0, 0, 32, 32], [0, 32, 32, 64], [32, 0, 64, 32], [32, 32, 64, 64], [0, 0, 64, 64]]
    np.testing.assert_allclose(a * 64, expected, atol=1e-4)


def test_anchors_per_location_is_ratios_times_octave_scales():
    # Defaults: 3 aspect ratios x 2 octave scales = 6 (the head's A); 1 ratio x 3 scales = 3.
    assert anchors_per_location() == 6
    assert anchors_per_location(aspect_ratios=(1.0,), scales_per_octave=3) == 3
    # It agrees with the anchors: 64 with levels 5-6 has 2 x 2 + 1 x 1 = 5 locations.
    a = multiscale_anchors(
        64, min_level=5, max_level=6, aspect_ratios=(1.0, 2.0), scales_per_octave=3
    )
    assert a.shape == (5 * anchors_per_location(aspect_ratios=(1.0, 2.0), scales_per_octave=3), 4)


def test_image_hw_accepts_ints_and_int_pairs_only():
    assert image_hw(320) == (320, 320)
    assert image_hw(np.int64(64)) == (64, 64)
    assert image_hw((192, np.int32(200))) == (192, 200)  # (height, width), in that order
    assert image_hw(1) == (1, 1)  # the smallest size: 1 pixel is positive
    for bad in (True, (320.0, 320), (320, 320.0), (True, 2), (2, False), [320, 320, 3]):
        with pytest.raises(ValueError, match="image_size must be an int or a"):
            image_hw(bad)
    for bad in (0, -3, (0, 5), (5, -1)):
        with pytest.raises(ValueError, match="image_size must be positive"):
            image_hw(bad)


def test_level_range_edges():
    # A one-pixel image: ceil(1 / 2^l) = 1 cell at every level.
    assert feature_map_sizes(1) == [(1, 1)] * 5
    # min_level = 1 (stride 2) is allowed, and so is a single level (min_level == max_level):
    # ceil(10 / 2) = 5, ceil(10 / 4) = 3, ceil(10 / 8) = 2.
    assert feature_map_sizes(10, min_level=1, max_level=3) == [(5, 5), (3, 3), (2, 2)]
    assert feature_map_sizes((40, 24), min_level=3, max_level=3) == [(5, 3)]
    one_level = multiscale_anchors(16, min_level=4, max_level=4, anchor_scale=1.0,
                                   aspect_ratios=(1.0,), scales_per_octave=1)  # fmt: skip
    # Stride 16, 16 % 16 == 0 -> offset 8, side 16: the whole image.
    np.testing.assert_allclose(one_level * 16, [[0, 0, 16, 16]], atol=1e-5)
    for min_level, max_level in ((0, 3), (4, 3)):
        with pytest.raises(ValueError, match="need 1 <= min_level <= max_level"):
            feature_map_sizes(64, min_level=min_level, max_level=max_level)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"image_size": 0}, "image_size must be positive"),
        ({"image_size": (320,)}, "image_size must be an int or a"),
        ({"image_size": 320.0}, "image_size must be an int or a"),
        ({"image_size": 320, "min_level": 5, "max_level": 4}, "min_level <= max_level"),
        ({"image_size": 320, "anchor_scale": 0.0}, "anchor_scale must be positive"),
        ({"image_size": 320, "aspect_ratios": ()}, "aspect_ratios must be"),
        ({"image_size": 320, "aspect_ratios": (1.0, -2.0)}, "aspect_ratios must be"),
        # A ratio of exactly 0 is not positive (it would give infinitely tall anchors).
        ({"image_size": 320, "aspect_ratios": (1.0, 0.0)}, "aspect_ratios must be"),
        ({"image_size": 320, "scales_per_octave": 0}, "scales_per_octave must be"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        multiscale_anchors(**kwargs)
