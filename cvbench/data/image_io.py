"""Image files as the builders meet them: sniffed by content, re-encoded to RGB JPEG when needed.

Real image collections are not what their extensions say: ImageNet's training set holds a PNG
and a few CMYK JPEGs behind `.JPEG` names, and grayscale JPEGs. TensorFlow's JPEG decoder
cannot read CMYK (libjpeg has no CMYK -> RGB conversion) and the fused decode-and-crop only
reads JPEG, so `to_rgb_jpeg` returns RGB JPEG bytes for any image Pillow can read:

* an RGB JPEG that needs no resizing is kept byte for byte (no generation loss);
* anything else (PNG, GIF, BMP, ... behind any name; CMYK, grayscale, palette or 16-bit
  modes) is converted to RGB and encoded as a JPEG at the given quality;
* a resize re-encodes too. `resize=S` (an int) scales the shorter side down to S pixels,
  keeping the aspect ratio (never up); `resize=(H, W)` resizes to exactly H x W pixels, the
  fixed size NVIDIA's builder used (352 x 352, ignoring aspect ratio).

Every image is fully decoded once, so a truncated or corrupt file is found at build time
(`ImageError`) instead of in the middle of training. A JPEG is decoded strictly, by
libjpeg-turbo through `simplejpeg` (a libjpeg warning is an error): scan data garbled behind
a valid header ("premature end of data segment", many "extraneous bytes") is corrupt, where
Pillow fills the missing rows and says nothing; a few stray bytes before a marker (at most
`MAX_STRAY_JPEG_BYTES`, which TensorFlow decodes too) are accepted, as `cvbench predict`
accepts them. Before decoding, the size in the
file's header is checked against `max_pixels` (default `DEFAULT_MAX_PIXELS`, 64 megapixels:
decoding and converting a 13000 x 13000 PNG takes gigabytes); a larger image is an
`ImageError` too, which the builders skip and list like a corrupt file (`--max-pixels` raises
the limit). This check replaces Pillow's own (`Image.MAX_IMAGE_PIXELS`) during the call.

Pixels wider than 8 bits are brought to `[0, 255]` by one rule, `to_rgb_array`'s, which the
builders (`to_rgb`, before the JPEG encoding) and inference (`cvbench predict`, `classify`,
`detect`: `cvbench.inference.images.read_image`) both use, so a file gives the same pixels in
training, evaluation and prediction:

* float (Pillow mode "F", e.g. a float32 TIFF): taken to be in `[0, 1]`, multiplied by 255 and
  clipped to `[0, 255]` (NaN gives 0);
* unsigned 16-bit ("I;16", "I;16B", ...: 16-bit PNG and TIFF): scaled from the full range of
  the type, `v * 255 / 65535`;
* 32-bit and signed integers ("I", "I;16S", ...: int32 TIFF), whose type range says nothing
  about the data: kept as they are when every value is in `[0, 255]`, scaled by
  `255 / 65535` when every value is in `[0, 65535]`, else scaled from the image's own
  minimum and maximum to `[0, 255]`;

then rounded to uint8 (one grey channel repeated to RGB), a block of rows at a time.

`read_image_file` reads only a regular file (a FIFO named `x.JPEG` would block forever, a link
to `/dev/zero` never ends) of at most `max_bytes` (default `DEFAULT_MAX_IMAGE_BYTES`, 256 MiB:
no camera or scanner image comes near; `--max-image-bytes` raises it), through
`cvbench.utils.files.read_input`; anything else is an `ImageError` too.
No TensorFlow import: builder worker processes use this module.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from PIL import Image

from cvbench.utils.errors import USAGE_ERROR, BadFileError, CvbenchError
from cvbench.utils.files import read_input

Resize = int | tuple[int, int]

#: The most pixels (width x height, from the file's header) an image may have by default.
DEFAULT_MAX_PIXELS = 64_000_000
#: The largest image file (in bytes) the builders read by default.
DEFAULT_MAX_IMAGE_BYTES = 256 << 20
#: Stray bytes before a JPEG marker accepted as harmless (libjpeg's "extraneous bytes"
#: warning, which TensorFlow's decoder ignores); more mean scan data that did not decode.
MAX_STRAY_JPEG_BYTES = 16
_STRAY_BYTES = re.compile(
    r"^Corrupt JPEG data: (\d+) extraneous bytes before marker 0x[0-9a-f]{2}$"
)
#: Rows of wide (float, 16/32-bit) pixels converted at a time (`to_rgb_array`).
_ROWS_PER_BLOCK = 256
#: Pillow's modes of unsigned 16-bit pixels.
_UNSIGNED_16 = ("I;16", "I;16B", "I;16L", "I;16N")
#: The libjpeg output colour space for each Pillow mode of a JPEG (RGB for the others).
_JPEG_COLORSPACE = {"L": "GRAY", "CMYK": "CMYK"}


class ImageError(CvbenchError, ValueError):
    """An image file that cannot be read; the message is the reason, for the skip list."""

    exit_code = USAGE_ERROR  # a ValueError, as a bad argument (an image file: ImageFileError)


@dataclass(frozen=True)
class EncodedImage:
    """RGB JPEG bytes with their size.

    Attributes:
        data: the JPEG bytes.
        height: pixels.
        width: pixels.
        source_format: what the input was, e.g. 'JPEG' or 'PNG' (Pillow's format name).
        source_mode: the input's Pillow mode, e.g. 'RGB', 'CMYK', 'L'.
        reencoded: False when `data` is the input unchanged.
    """

    data: bytes
    height: int
    width: int
    source_format: str
    source_mode: str
    reencoded: bool


def parse_resize(text: str) -> Resize:
    """Parses a resize argument: '256' (shorter side) or '352x352' (height x width).

    Raises:
        ValueError: naming the text when it is neither form or a size is not positive.
    """
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", text)
    if not match:
        raise ValueError(
            f"resize must be SHORTER_SIDE (e.g. 256) or HxW (e.g. 352x352), got {text!r}"
        )
    if match.group(2) is None:
        return check_resize(int(match.group(1)))
    return check_resize((int(match.group(1)), int(match.group(2))))


def check_resize(resize: Resize | None) -> Resize | None:
    """Validates a resize value (None, a positive int, or a pair of positive ints)."""
    if resize is None:
        return None
    if isinstance(resize, int) and not isinstance(resize, bool):
        if resize <= 0:
            raise ValueError(f"resize shorter side must be positive, got {resize}")
        return resize
    if (
        isinstance(resize, tuple | list)
        and len(resize) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in resize)
    ):
        return (int(resize[0]), int(resize[1]))
    raise ValueError(f"resize must be None, a positive int or (height, width), got {resize!r}")


def resized_shape(height: int, width: int, resize: Resize | None) -> tuple[int, int]:
    """The (height, width) an image of `height` x `width` gets under `resize`.

    `resize=S` maps the shorter side to S when it is longer than S (the longer side is
    rounded to the nearest pixel); smaller images keep their size. `resize=(H, W)` gives (H, W).
    """
    if resize is None:
        return height, width
    if isinstance(resize, tuple):
        return resize
    shorter = min(height, width)
    if shorter <= resize:
        return height, width
    scale = resize / shorter
    if height <= width:
        return resize, max(1, round(width * scale))
    return max(1, round(height * scale)), resize


def read_image_file(
    path: str | os.PathLike, *, max_bytes: int | None = DEFAULT_MAX_IMAGE_BYTES
) -> bytes:
    """The bytes of an image file: a regular file of at most `max_bytes` bytes.

    Args:
        path: the file.
        max_bytes: the largest file accepted, checked before reading; None for no limit.

    Raises:
        ImageError: the file cannot be read (the reason: missing, a folder, a FIFO or a
            device, over `max_bytes`, ...).

    Example:
        >>> try:
        ...     read_image_file("/dev/zero")
        ... except ImageError as e:
        ...     print(e)
        cannot read file: /dev/zero is a character device, not a regular file
    """
    limit = max_bytes if max_bytes is not None else 1 << 62
    try:
        return read_input(path, limit=limit, what="image", flag="--max-image-bytes")
    except BadFileError as e:
        raise ImageError(f"cannot read file: {str(e).removeprefix('image ')}") from None
    except OSError as e:
        raise ImageError(f"cannot read file: {e.strerror or e}") from None


def check_max_bytes(max_bytes: int | None) -> int | None:
    """Validates a file size limit: None (no limit) or a positive int."""
    if max_bytes is None:
        return None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_image_bytes must be None or a positive int, got {max_bytes!r}")
    return max_bytes


def check_max_pixels(max_pixels: int | None) -> int | None:
    """Validates a pixel limit: None (no limit) or a positive int."""
    if max_pixels is None:
        return None
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
        raise ValueError(f"max_pixels must be None or a positive int, got {max_pixels!r}")
    return max_pixels


@contextlib.contextmanager
def _without_pillow_limit() -> Iterator[None]:
    """Pillow's decompression-bomb check off (ours, `max_pixels`, is made instead)."""
    old = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = old


_WEBP_CHUNKS = (b"VP8X", b"VP8 ", b"VP8L")


def header_shape(data: bytes) -> tuple[int, int, int]:
    """`(frames, height, width)` the decoders allocate for the encoded image `data`, read
    from its headers without decoding (no Pillow), for the formats the readers decode: JPEG
    (the frame header, markers walked as libjpeg does), PNG, GIF (every frame: libgif reads
    them all, at the largest extent of the screen and the frames), BMP (the info header or
    OS/2's core header; a negative height is a top-down image) and WebP (the VP8X canvas, a
    VP8 key frame's or a VP8L header's size); `(0, 0, 0)` for anything else or a header cut
    short (its decoder refuses it). The readers bound `frames * height * width` before
    decoding (`cvbench.data.read.image_header` in tf.data, grain's reader).

    Example:
        >>> buf = io.BytesIO()
        >>> Image.new("RGB", (300, 7)).save(buf, "PNG")
        >>> header_shape(buf.getvalue()), header_shape(b"not an image")
        ((1, 7, 300), (0, 0, 0))
    """
    head = data[:32].ljust(32, b"\0")
    if head[:3] == b"\xff\xd8\xff":
        height, width = _jpeg_size(data)
    elif head[:8] == b"\x89PNG\r\n\x1a\n":
        width, height = struct.unpack(">II", head[16:24])
    elif head[:4] == b"GIF8":
        return _gif_shape(data)
    elif head[:2] == b"BM":
        height, width = _bmp_size(head)
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP" and head[12:16] in _WEBP_CHUNKS:
        height, width = _webp_size(head)
    else:
        return 0, 0, 0
    return (1, height, width) if height and width else (0, 0, 0)


def _bmp_size(head: bytes) -> tuple[int, int]:
    if int.from_bytes(head[14:18], "little") == 12:  # OS/2's core header: 16-bit sides
        width, height = struct.unpack("<HH", head[18:22])
        return height, width
    width, height = struct.unpack("<ii", head[18:26])
    return abs(height), abs(width)


def _webp_size(head: bytes) -> tuple[int, int]:
    if head[12:16] == b"VP8X":  # the canvas: 24-bit width - 1, height - 1
        return int.from_bytes(head[27:30], "little") + 1, int.from_bytes(head[24:27], "little") + 1
    if head[12:16] == b"VP8 ":  # a key frame: 14-bit width, height (2 bits of scale above)
        width, height = struct.unpack("<HH", head[26:30])
        return height % 16384, width % 16384
    bits = int.from_bytes(head[21:25], "little")  # VP8L: 14 bits width - 1, height - 1
    return bits // 16384 % 16384 + 1, bits % 16384 + 1


def _gif_shape(data: bytes) -> tuple[int, int, int]:
    """`(frames, height, width)` of a GIF: its image descriptors counted, the largest extent
    of the logical screen and of every frame (a frame may be larger than the screen: libgif
    and Pillow decode it at its own size)."""
    if len(data) < 13:
        return 0, 0, 0
    width, height, flags = struct.unpack("<HHB", data[6:11])
    at = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)  # the global colour table
    frames = 0
    while at < len(data) and data[at] != 0x3B:  # up to the trailer
        if data[at] == 0x21:  # an extension: its label, then data sub-blocks
            at = _after_sub_blocks(data, at + 2)
        elif data[at] == 0x2C and at + 10 <= len(data):  # an image descriptor
            left, top, w, h, flags = struct.unpack("<HHHHB", data[at + 1 : at + 10])
            frames += 1
            height, width = max(height, top + h), max(width, left + w)
            at += 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)  # a local colour table
            at = _after_sub_blocks(data, at + 1)  # the LZW code size, then the image data
        else:
            break
    return (max(frames, 1), height, width) if height and width else (0, 0, 0)


def _after_sub_blocks(data: bytes, at: int) -> int:
    """The position after the data sub-blocks starting at `at` (sizes, up to a 0 size)."""
    while at < len(data):
        size = data[at]
        at += 1 + size
        if size == 0:
            break
    return at


#: JPEG markers that start a frame (SOF0-SOF15 but DHT, JPG and DAC), whose header holds the size.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """The size in the frame header of a JPEG, markers walked from SOI as libjpeg's
    `next_marker` does (stray bytes, fill bytes and `FF 00` skipped); `(0, 0)` when none is
    found."""
    at = 2
    while True:
        at = data.find(b"\xff", at)  # stray bytes before a marker: skipped, as libjpeg warns
        if at < 0 or at + 4 > len(data):
            return 0, 0
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte
            at += 1
        elif marker == 0x00 or 0xD0 <= marker <= 0xD8 or marker == 0x01:
            at += 2  # a stuffed zero, or a marker without a length
        elif marker in _SOF:
            if at + 9 > len(data):
                return 0, 0
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return height, width
        elif marker in (0xD9, 0xDA):  # end of image, or scan data before any frame header
            return 0, 0
        else:
            at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")


def header_pixels(data: bytes) -> int:
    """The pixels the decoders allocate for `data` (`header_shape`: frames x height x width)."""
    frames, height, width = header_shape(data)
    return frames * height * width


def describe_shape(frames: int, height: int, width: int) -> str:
    """`"20000 x 20000 = 400,000,000 pixels"`, or for frames of an animation `"3 frames of
    100 x 50 = 15,000 pixels"`: the words of a refusal by the pixel bound."""
    size = f"{height} x {width}" if frames == 1 else f"{frames} frames of {height} x {width}"
    return f"{size} = {frames * height * width:,} pixels"


def _open_header(data: bytes, max_pixels: int | None) -> Image.Image:
    """The image, its header read (not decoded), refused when over `max_pixels`."""
    if not data:
        raise ImageError("empty file")
    try:
        image = Image.open(io.BytesIO(data))
    except Image.UnidentifiedImageError:
        raise ImageError("not an image Pillow can read") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"unreadable image header: {e}") from None
    pixels = image.width * image.height
    if max_pixels is not None and pixels > max_pixels:
        raise ImageError(
            f"image of {image.width} x {image.height} = {pixels:,} pixels, over the limit of "
            f"{max_pixels:,} (max_pixels, --max-pixels)"
        )
    return image


def to_rgb_jpeg(
    data: bytes,
    *,
    resize: Resize | None = None,
    quality: int = 90,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> EncodedImage:
    """Returns `data` as RGB JPEG bytes, re-encoding only when needed (see the module doc).

    Args:
        data: the bytes of an image file in any format Pillow reads.
        resize: None, a shorter side in pixels (int), or a fixed (height, width).
        quality: JPEG quality for re-encoded images, 1..100.
        max_pixels: the most pixels (width x height, read from the header before decoding)
            the image may have; None for no limit.

    Raises:
        ImageError: the reason the bytes are not a readable image (empty, not an image,
            truncated, corrupt, over `max_pixels`).

    Example:
        >>> png = io.BytesIO()
        >>> Image.new("RGB", (300, 200)).save(png, "PNG")
        >>> try:
        ...     to_rgb_jpeg(png.getvalue(), max_pixels=50_000)
        ... except ImageError as e:
        ...     print(e)
        image of 300 x 200 = 60,000 pixels, over the limit of 50,000 (max_pixels, --max-pixels)
        >>> to_rgb_jpeg(png.getvalue(), max_pixels=60_000).reencoded
        True
    """
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    resize = check_resize(resize)
    max_pixels = check_max_pixels(max_pixels)
    with _without_pillow_limit():
        return _to_rgb_jpeg(data, resize, quality, max_pixels)


def _to_rgb_jpeg(
    data: bytes, resize: Resize | None, quality: int, max_pixels: int | None
) -> EncodedImage:
    image = _open_header(data, max_pixels)
    source_format, source_mode = image.format or "unknown", image.mode
    height, width = image.height, image.width
    target = resized_shape(height, width, resize)
    if source_format == "JPEG":
        _check_jpeg_data(data, source_mode, target)
        if source_mode == "RGB" and target == (height, width):  # kept: decoded just now
            return EncodedImage(data, height, width, source_format, source_mode, reencoded=False)
    if target != (height, width) and source_format == "JPEG":
        # Let libjpeg decode at 1/2, 1/4 or 1/8 scale when that still covers the target.
        image.draft(None, (target[1], target[0]))
    try:
        image.load()  # a full decode: truncated or corrupt data raises here
    except (OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"corrupt or truncated image: {e}") from None
    if source_format == "JPEG" and source_mode == "RGB" and target == (height, width):
        return EncodedImage(data, height, width, source_format, source_mode, reencoded=False)
    rgb = to_rgb(image)
    if rgb.size != (target[1], target[0]):
        rgb = rgb.resize((target[1], target[0]), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    rgb.save(out, format="JPEG", quality=quality)
    return EncodedImage(
        out.getvalue(), target[0], target[1], source_format, source_mode, reencoded=True
    )


def _check_jpeg_data(data: bytes, mode: str, target: tuple[int, int]) -> None:
    """Decodes the JPEG `data` strictly (`simplejpeg`, at the smallest scale libjpeg offers
    that still covers `target`); a few stray bytes before a marker pass.

    Raises:
        ImageError: libjpeg's complaint (garbled or cut-short scan data).
    """
    import simplejpeg

    try:
        simplejpeg.decode_jpeg(
            data,
            colorspace=_JPEG_COLORSPACE.get(mode, "RGB"),
            min_height=target[0],
            min_width=target[1],
        )
    except ValueError as e:
        stray = _STRAY_BYTES.match(str(e))
        if stray and int(stray.group(1)) <= MAX_STRAY_JPEG_BYTES:
            return
        raise ImageError(f"corrupt or truncated image: {e}") from None


def to_rgb(image: Image.Image) -> Image.Image:
    """A decoded Pillow image as 8-bit RGB: the first frame of an animation, transparent
    pixels over white (as a viewer shows them), pixels wider than 8 bits brought to
    `[0, 255]` by `to_rgb_array`'s rule (module docstring), the rule inference uses.

    Example:
        >>> to_rgb(Image.fromarray(np.full((1, 2), 0.5, np.float32), mode="F")).getpixel((0, 0))
        (128, 128, 128)
    """
    if getattr(image, "n_frames", 1) > 1:
        image.seek(0)
    grey = _wide_to_grey(image)
    if grey is not None:
        return Image.fromarray(grey).convert("RGB")
    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        rgb = Image.new("RGB", rgba.size, (255, 255, 255))
        rgb.paste(rgba, mask=rgba.getchannel("A"))
        return rgb
    return image.convert("RGB")


def to_rgb_array(image: Image.Image) -> np.ndarray:
    """A decoded Pillow image as `(H, W, 3)` uint8 RGB, wide pixels brought to `[0, 255]` by
    the rule of the module docstring: the pixels of `to_rgb`, which the builders encode.

    Example:
        >>> to_rgb_array(Image.fromarray(np.full((1, 2), 0.5, np.float32), mode="F"))[0, 0]
        array([128, 128, 128], dtype=uint8)
        >>> to_rgb_array(Image.fromarray(np.array([[0, 65535]], np.uint16)))[0, :, 0]
        array([  0, 255], dtype=uint8)
        >>> to_rgb_array(Image.fromarray(np.array([[7, 200]], np.int32), mode="I"))[0, :, 0]
        array([  7, 200], dtype=uint8)
    """
    if getattr(image, "n_frames", 1) > 1:
        image.seek(0)
    grey = _wide_to_grey(image)
    if grey is None:
        return np.asarray(to_rgb(image), dtype=np.uint8)
    return np.repeat(grey[..., None], 3, axis=-1)


def _wide_to_grey(image: Image.Image) -> np.ndarray | None:
    """The `(H, W)` uint8 grey of an image of float, 16-bit or 32-bit pixels by the rule of
    the module docstring, a block of rows at a time; None for an image of another mode."""
    mode = image.mode
    if mode == "F":
        rule = "float"
    elif mode in _UNSIGNED_16:
        rule = "16-bit"
    elif mode == "I" or mode.startswith("I;"):
        rule = "integer"
        image = image if mode == "I" else image.convert("I")
        low, high = (float(v) for v in image.getextrema())
    else:
        return None
    width, height = image.size
    grey = np.empty((height, width), np.uint8)
    for top in range(0, height, _ROWS_PER_BLOCK):
        bottom = min(top + _ROWS_PER_BLOCK, height)
        block = np.asarray(image.crop((0, top, width, bottom)), dtype=np.float64)
        if rule == "float":
            block = np.nan_to_num(block, nan=0.0) * 255.0
        elif rule == "16-bit":
            block = block * (255.0 / 65535.0)
        else:
            block = _integer_to_255(block, low, high)
        grey[top:bottom] = np.clip(block, 0.0, 255.0).round()
    return grey


def _integer_to_255(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """32-bit and signed integers to `[0, 255]` by the rule of the module docstring, given
    the whole image's minimum `low` and maximum `high`."""
    if low >= 0 and high <= 255:
        return values
    if low >= 0 and high <= 65535:
        return values * (255.0 / 65535.0)
    return (values - low) * (255.0 / (high - low))
