"""An encoded image's size, read in the graph from its header, and the pixel bound the
tf.data readers apply before decoding.

A record's image is decoded whole (evaluation) or its header is trusted for the crop
(training), so an image that claims 20000 x 20000 pixels in a 1 MB PNG costs 1.2 GB to decode
and, as float32 in the evaluation view, 4.8 GB more, times the parallel map's width: a few
such records exhaust the machine's memory. `bounded_image` checks the header's size against
`max_pixels` first (the builders' and `cvbench predict`'s bound, `DEFAULT_MAX_PIXELS`, 64
megapixels), so such a record is a corrupt one (named, or skipped under `--skip-corrupt`)
and nothing is decoded.

The rule is `cvbench.data.image_io.header_shape`'s (grain's reader uses it too): a JPEG's
size is read by TensorFlow's own `extract_jpeg_shape` (libjpeg's marker walk, the record
path's common case, in the graph); any other format through `header_shape` itself
(`tf.numpy_function`: PNG, GIF with all its frames, BMP, WebP).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from cvbench.data.image_io import describe_shape, header_shape


def _bytes(encoded: bytes | np.ndarray) -> bytes:
    """A string tensor's value as `tf.numpy_function` hands it over: bytes (or a 0-d array)."""
    return encoded.item() if isinstance(encoded, np.ndarray) else bytes(encoded)


def _python_shape(encoded: bytes | np.ndarray) -> np.ndarray:
    return np.asarray(header_shape(_bytes(encoded)), np.int64)


def image_shape(encoded: tf.Tensor) -> tf.Tensor:
    """`[frames, height, width]` (int64) the decoder allocates for the encoded image
    `encoded` (a scalar string), read from its header without decoding
    (`image_io.header_shape`); `[0, 0, 0]` for a format `tf.io.decode_image` does not read.
    A JPEG whose header cannot be read raises `InvalidArgumentError`, as its decode would.

    Example:
        >>> import io
        >>> from PIL import Image
        >>> shapes = []
        >>> for fmt in ("JPEG", "PNG", "GIF", "BMP", "WEBP"):
        ...     buf = io.BytesIO()
        ...     Image.new("RGB", (300, 7)).save(buf, fmt)
        ...     shapes.append(image_shape(tf.constant(buf.getvalue())).numpy().tolist())
        >>> shapes
        [[1, 7, 300], [1, 7, 300], [1, 7, 300], [1, 7, 300], [1, 7, 300]]
        >>> image_shape(tf.constant(b"not an image")).numpy().tolist()
        [0, 0, 0]
    """

    def jpeg() -> tf.Tensor:
        size = tf.cast(tf.image.extract_jpeg_shape(encoded)[:2], tf.int64)
        return tf.concat([tf.ones([1], tf.int64), size], 0)

    def other() -> tf.Tensor:
        shape = tf.numpy_function(_python_shape, [encoded], tf.int64, stateful=False)
        return tf.reshape(shape, [3])

    shape = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    shape.set_shape([3])
    return shape


#: The largest bound compared in the graph (int64): more pixels than any image can claim
#: (GIF: 65535 x 65535 per frame), so a larger `max_pixels` bounds the same.
_GRAPH_LIMIT = 2**62


def _graph_limit(max_pixels: int) -> int:
    return min(max_pixels, _GRAPH_LIMIT)


def bounded_image(encoded: tf.Tensor, max_pixels: int | None) -> tf.Tensor:
    """`encoded`, once its header is checked: an image of more than `max_pixels` pixels
    (`image_shape`: frames x height x width) raises `InvalidArgumentError` when read,
    before anything decodes it (the corrupt-record guard names it, `over_limit_message`).
    None: `encoded` unchecked."""
    if max_pixels is None:
        return encoded
    pixels = tf.reduce_prod(image_shape(encoded))
    check = tf.debugging.Assert(pixels <= _graph_limit(max_pixels), ["image over max_pixels"])
    with tf.control_dependencies([check]):
        return tf.identity(encoded)


def over_limit(encoded: tf.Tensor, max_pixels: int) -> tf.Tensor:
    """Whether the header of `encoded` claims more than `max_pixels` pixels (a bool scalar)."""
    return tf.reduce_prod(image_shape(encoded)) > _graph_limit(max_pixels)


def _describe(encoded: bytes | np.ndarray) -> bytes:
    return describe_shape(*header_shape(_bytes(encoded))).encode()


def over_limit_message(encoded: tf.Tensor, max_pixels: int) -> tf.Tensor:
    """`is H x W = P pixels, over the limit of M (max_pixels, --max-pixels)`: what is wrong
    with an image `bounded_image` refused (a string scalar), in `image_io.describe_shape`'s
    words (grain's too)."""
    shape = tf.numpy_function(_describe, [encoded], tf.string, stateful=False)
    return tf.strings.join(
        [
            "is ",
            tf.reshape(shape, []),
            f", over the limit of {max_pixels:,} (max_pixels, --max-pixels)",
        ]
    )
