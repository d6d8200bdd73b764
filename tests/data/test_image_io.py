"""Sniffing and re-encoding of real-world image files (Pillow only: runs on any backend)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from imagenet_testdata import encode, smooth_image
from PIL import Image

from cvbench.data.image_io import (
    ImageError,
    parse_resize,
    resized_shape,
    to_rgb_jpeg,
)

pytestmark = pytest.mark.backend_agnostic


def _decode(data: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(data))
    assert image.format == "JPEG" and image.mode == "RGB"
    return np.asarray(image).astype(np.int32)


def test_rgb_jpeg_is_kept_byte_for_byte():
    data = encode(smooth_image(1), quality=95)
    out = to_rgb_jpeg(data)
    assert out.data is data and not out.reencoded
    assert (out.height, out.width, out.source_format, out.source_mode) == (40, 56, "JPEG", "RGB")


@pytest.mark.parametrize(
    ("fmt", "mode", "expected_format", "expected_mode"),
    [
        ("PNG", None, "PNG", "RGB"),
        ("JPEG", "CMYK", "JPEG", "CMYK"),
        ("JPEG", "L", "JPEG", "L"),
        ("PNG", "RGBA", "PNG", "RGBA"),
        ("BMP", None, "BMP", "RGB"),
    ],
)
def test_other_formats_and_modes_become_rgb_jpeg(fmt, mode, expected_format, expected_mode):
    array = smooth_image(2)
    out = to_rgb_jpeg(encode(array, fmt, mode), quality=95)
    assert out.reencoded
    assert (out.source_format, out.source_mode) == (expected_format, expected_mode)
    decoded = _decode(out.data)
    assert decoded.shape == (40, 56, 3)
    reference = np.asarray(Image.fromarray(array).convert(mode or "RGB").convert("RGB"))
    # Smooth gradients survive JPEG at quality 95 (and CMYK/palette round trips) within a few
    # levels on average; a wrong channel order or an un-inverted CMYK would be off by ~100.
    assert np.abs(decoded - reference.astype(np.int32)).mean() < 6


def test_palette_gif_becomes_rgb_jpeg():
    palette = Image.fromarray(smooth_image(4)).quantize(colors=64, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    palette.save(buf, format="GIF")
    out = to_rgb_jpeg(buf.getvalue(), quality=95)
    assert (out.source_format, out.source_mode, out.reencoded) == ("GIF", "P", True)
    reference = np.asarray(palette.convert("RGB")).astype(np.int32)
    assert np.abs(_decode(out.data) - reference).mean() < 6


def test_sixteen_bit_png_is_scaled_to_eight_bits():
    gray16 = (np.arange(40 * 56, dtype=np.uint16).reshape(40, 56) * 29).astype(np.uint16)
    out = to_rgb_jpeg(encode(gray16, "PNG"), quality=100)
    decoded = _decode(out.data)
    # Pixel 16-bit value v becomes round(v * 255 / 65535): the last pixel is 2239 * 29 = 64931
    # -> 252.65 -> 253.
    assert abs(decoded[-1, -1, 0] - 253) <= 3
    assert abs(decoded[0, 0, 0] - 0) <= 3


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"this is not an image at all", "not an image"),
    ],
)
def test_unreadable_bytes_raise_image_error_with_a_reason(data, reason):
    with pytest.raises(ImageError, match=reason):
        to_rgb_jpeg(data)


def test_truncated_jpeg_is_found_by_the_full_decode():
    rng = np.random.default_rng(0)
    noisy = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)  # noise: most bytes are scan data
    data = encode(noisy, quality=95)
    with pytest.raises(ImageError, match="truncated"):
        to_rgb_jpeg(data[: len(data) * 3 // 4])


@pytest.mark.parametrize(
    ("shape", "resize", "expected"),
    [
        ((40, 56), 20, (20, 28)),  # 56 * 20 / 40 = 28
        ((56, 40), 20, (28, 20)),
        ((375, 500), 256, (256, 341)),  # 500 * 256 / 375 = 341.33 -> 341
        ((40, 56), 64, (40, 56)),  # shorter side already below 64: never upscaled
        ((40, 56), (16, 24), (16, 24)),  # fixed size: exactly that
        ((40, 56), (80, 80), (80, 80)),  # fixed size upscales too (NVIDIA's 352x352)
        ((40, 56), None, (40, 56)),
    ],
)
def test_resized_shape(shape, resize, expected):
    assert resized_shape(*shape, resize) == expected


def test_resize_reencodes_to_the_computed_size():
    data = encode(smooth_image(3), quality=95)
    out = to_rgb_jpeg(data, resize=20)
    assert (out.height, out.width) == (20, 28) and out.reencoded
    assert _decode(out.data).shape == (20, 28, 3)
    fixed = to_rgb_jpeg(data, resize=(16, 24))
    assert _decode(fixed.data).shape == (16, 24, 3)


def test_parse_resize():
    assert parse_resize("256") == 256
    assert parse_resize("352x352") == (352, 352)
    assert parse_resize(" 300 X 200 ") == (300, 200)
    for bad in ("", "0", "12x", "axb", "-5", "3x0"):
        with pytest.raises(ValueError, match="resize"):
            parse_resize(bad)


def test_quality_out_of_range_raises():
    with pytest.raises(ValueError, match="quality must be in 1..100, got 0"):
        to_rgb_jpeg(encode(smooth_image(1)), quality=0)
