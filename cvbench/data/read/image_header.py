"""An encoded image's size, read in the graph from its header, and the pixel bound the
tf.data readers apply before decoding.

A record's image is decoded whole (evaluation) or its header is trusted for the crop
(training), so an image that claims 20000 x 20000 pixels in a 1 MB PNG costs 1.2 GB to decode
and, as float32 in the evaluation view, 4.8 GB more, times the parallel map's width: a few
such records exhaust the machine's memory. `bounded_image` checks the header's size against
`max_pixels` first (the builders' and `cvbench predict`'s bound, `DEFAULT_MAX_PIXELS`, 64
megapixels), so such a record is a corrupt one (named, or skipped under `--skip-corrupt`)
and nothing is decoded.

`header_size` reads the formats `tf.io.decode_image` decodes: JPEG (`extract_jpeg_shape`,
which reads the markers up to the frame header), PNG (IHDR), GIF (the logical screen,
the size `decode_gif` allocates), BMP (the info header; a negative height is a top-down
image) and WebP (the VP8X canvas, a VP8 key frame's or a VP8L header's size). Anything else
reads as 0 x 0: the decoder refuses what it cannot read.
"""

from __future__ import annotations

import tensorflow as tf

#: Bytes of the header read for the formats other than JPEG.
_HEAD = 32

_PNG = (0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A)
_GIF = (0x47, 0x49, 0x46, 0x38)  # "GIF8" (GIF87a, GIF89a)
_BMP = (0x42, 0x4D)  # "BM"
_RIFF, _WEBP = (0x52, 0x49, 0x46, 0x46), (0x57, 0x45, 0x42, 0x50)
_VP8X, _VP8, _VP8L = (0x56, 0x50, 0x38, 0x58), (0x56, 0x50, 0x38, 0x20), (0x56, 0x50, 0x38, 0x4C)


def _starts(head: tf.Tensor, at: int, signature: tuple[int, ...]) -> tf.Tensor:
    return tf.reduce_all(tf.equal(head[at : at + len(signature)], tf.constant(signature, tf.int64)))


def _le(head: tf.Tensor, at: int, n: int) -> tf.Tensor:
    """The unsigned little-endian integer of bytes `at` .. `at + n - 1`."""
    return tf.reduce_sum(head[at : at + n] * tf.constant([256**i for i in range(n)], tf.int64))


def _be32(head: tf.Tensor, at: int) -> tf.Tensor:
    return tf.reduce_sum(head[at : at + 4] * tf.constant([1 << 24, 1 << 16, 1 << 8, 1], tf.int64))


def _bmp_side(value: tf.Tensor) -> tf.Tensor:
    """An int32 side of a BMP header (read unsigned), as its absolute value."""
    return tf.abs(tf.where(value >= 1 << 31, value - (1 << 32), value))


def _other_size(encoded: tf.Tensor) -> tf.Tensor:
    """`[height, width]` (int64) of a PNG, GIF, BMP or WebP header; `[0, 0]` otherwise."""
    padded = tf.strings.join([tf.strings.substr(encoded, 0, _HEAD), b"\0" * _HEAD])
    head = tf.cast(tf.io.decode_raw(tf.strings.substr(padded, 0, _HEAD), tf.uint8), tf.int64)
    head.set_shape([_HEAD])
    webp = tf.logical_and(_starts(head, 0, _RIFF), _starts(head, 8, _WEBP))
    bits = _le(head, 21, 4)  # VP8L: 14 bits width - 1, then 14 bits height - 1
    sizes = [  # (is this format, height, width), the first true one wins
        (_starts(head, 0, _PNG), _be32(head, 20), _be32(head, 16)),
        (_starts(head, 0, _GIF), _le(head, 8, 2), _le(head, 6, 2)),
        (_starts(head, 0, _BMP), _bmp_side(_le(head, 22, 4)), _bmp_side(_le(head, 18, 4))),
        (webp & _starts(head, 12, _VP8X), _le(head, 27, 3) + 1, _le(head, 24, 3) + 1),
        (webp & _starts(head, 12, _VP8), _le(head, 28, 2) % 16384, _le(head, 26, 2) % 16384),
        (webp & _starts(head, 12, _VP8L), bits // 16384 % 16384 + 1, bits % 16384 + 1),
    ]
    size = tf.zeros([2], tf.int64)
    for is_format, height, width in reversed(sizes):
        size = tf.where(is_format, tf.stack([height, width]), size)
    return size


def header_size(encoded: tf.Tensor) -> tf.Tensor:
    """`[height, width]` (int64) of the encoded image `encoded` (a scalar string), read from
    its header without decoding; `[0, 0]` for a format `tf.io.decode_image` does not read. A
    JPEG whose header cannot be read raises `InvalidArgumentError`, as its decode would.

    Example:
        >>> import io
        >>> from PIL import Image
        >>> sizes = []
        >>> for fmt in ("JPEG", "PNG", "GIF", "BMP", "WEBP"):
        ...     buf = io.BytesIO()
        ...     Image.new("RGB", (300, 7)).save(buf, fmt)
        ...     sizes.append(header_size(tf.constant(buf.getvalue())).numpy().tolist())
        >>> sizes
        [[7, 300], [7, 300], [7, 300], [7, 300], [7, 300]]
        >>> header_size(tf.constant(b"not an image")).numpy().tolist()
        [0, 0]
    """
    return tf.cond(
        tf.io.is_jpeg(encoded),
        lambda: tf.cast(tf.image.extract_jpeg_shape(encoded)[:2], tf.int64),
        lambda: _other_size(encoded),
    )


def over_limit(encoded: tf.Tensor, max_pixels: int) -> tf.Tensor:
    """Whether the header of `encoded` claims more than `max_pixels` pixels (a bool scalar)."""
    size = header_size(encoded)
    return size[0] * size[1] > max_pixels


def bounded_image(encoded: tf.Tensor, max_pixels: int | None) -> tf.Tensor:
    """`encoded`, once its header is checked: an image of more than `max_pixels` pixels
    raises `InvalidArgumentError` when read, before anything decodes it (the corrupt-record
    guard names it, `over_limit_message`). None: `encoded` unchecked."""
    if max_pixels is None:
        return encoded

    def fail() -> tf.Tensor:
        with tf.control_dependencies([tf.debugging.Assert(False, ["image over max_pixels"])]):
            return tf.constant(False)

    done = tf.cond(over_limit(encoded, max_pixels), fail, lambda: tf.constant(True))
    with tf.control_dependencies([done]):
        return tf.identity(encoded)


def over_limit_message(encoded: tf.Tensor, max_pixels: int) -> tf.Tensor:
    """`is H x W = P pixels, over the limit of M (max_pixels)`: what is wrong with an image
    `bounded_image` refused (a string scalar)."""
    size = header_size(encoded)
    return tf.strings.join(
        [
            "is ",
            tf.strings.as_string(size[0]),
            " x ",
            tf.strings.as_string(size[1]),
            " = ",
            tf.strings.as_string(size[0] * size[1]),
            f" pixels, over the limit of {max_pixels:,} (max_pixels, --max-pixels)",
        ]
    )
