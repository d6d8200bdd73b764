"""The readers bound a record's image by the size in its header, before decoding it
(`ReadSpec.max_pixels`, 64 megapixels by default, the builders' bound).

Before: a record set whose PNGs claimed 16000 x 16000 pixels (745 KB each, 6 MB of records)
made `cvbench eval` take 15 GB of memory, and at 20000 x 20000 an error line and then no exit
(probe p49, finding 1): `tf.io.decode_image` decoded the whole image, and the evaluation view
made a float32 copy, per parallel map call. grain decoded 16000 x 16000 JPEGs whole too.

The header rule is `image_io.header_shape` (frames, height, width), grain's and tf.data's
(`image_header.image_shape`: TensorFlow's `extract_jpeg_shape` for a JPEG, the Python rule
through `tf.numpy_function` for the other formats): both are checked against the decoded size,
per format, on images Pillow writes and on crafted ones (a GIF frame larger than its screen,
an animation, `FF 00` and stray bytes before a JPEG marker, OS/2's BMP core header: the
review's cases).
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cvbench.benchmark.input_bench import tfrecord_frame
from cvbench.cli.errors import known_error
from cvbench.data.coco_schema import CocoImage, CocoObject, coco_example
from cvbench.data.grain.dataset import imagenet_grain_dataset
from cvbench.data.image_io import DEFAULT_MAX_PIXELS, header_shape
from cvbench.data.read import coco, image_header
from cvbench.data.read.corrupt import CorruptRecordCounter
from cvbench.data.read.imagenet import imagenet_dataset
from cvbench.data.read.spec import ReadSpec
from cvbench.data.tfrecord import imagenet_example
from cvbench.utils.errors import BadFileError


def _encode(width: int, height: int, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    pixels = np.arange(width * height * 3, dtype=np.uint8).reshape(height, width, 3)
    Image.fromarray(pixels).save(buf, fmt, **options)
    return buf.getvalue()


FORMATS = {
    "jpeg": ("JPEG", {}),
    "jpeg_progressive": ("JPEG", {"progressive": True}),
    "png": ("PNG", {}),
    "gif": ("GIF", {}),
    "bmp": ("BMP", {}),
    "webp_lossy": ("WEBP", {}),
    "webp_lossless": ("WEBP", {"lossless": True}),
    "webp_extended": ("WEBP", {"exif": b"Exif\0\0MM"}),  # a VP8X chunk (its canvas)
}


def _both(data: bytes) -> tuple[tuple[int, int, int], list[int]]:
    return header_shape(data), image_header.image_shape(tf.constant(data)).numpy().tolist()


@pytest.mark.parametrize("size", [(1, 1), (300, 7), (7, 300), (129, 65)])
@pytest.mark.parametrize("kind", FORMATS)
def test_both_header_rules_read_the_decoded_size(kind, size):
    fmt, options = FORMATS[kind]
    data = _encode(*size, fmt, **options)
    width, height = size
    decoded = tf.io.decode_image(data, channels=3, expand_animations=False).shape[:2]
    assert tuple(decoded) == (height, width)
    python, graph = _both(data)
    assert python == (1, height, width) and graph == [1, height, width]


def test_a_top_down_bmp_reads_its_height_as_positive():
    data = bytearray(_encode(3, 5, "BMP"))
    data[22:26] = struct.pack("<i", -5)  # the same rows, stored top-down
    assert tf.io.decode_image(bytes(data)).shape[:2] == (5, 3)
    assert _both(bytes(data)) == ((1, 5, 3), [1, 5, 3])


def test_an_os2_core_header_bmp_reads_its_16_bit_sides():
    # OS/2's 12-byte core header: uint16 width and height at bytes 18 and 20 (the int32
    # reading gave 1572865 x 5242980 and refused a valid 100 x 80 image)
    rows = b"".join(bytes([i % 256] * 300) for i in range(80))  # 100 px x 3 bytes, 4-aligned
    header = struct.pack("<2sIHHI", b"BM", 26 + len(rows), 0, 0, 26)
    data = header + struct.pack("<IHHHH", 12, 100, 80, 1, 24) + rows
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (100, 80)
    assert header_shape(data) == (1, 80, 100)


def _gif_frame_larger_than_its_screen() -> bytes:
    """A GIF whose screen is 1 x 1 and whose one frame is 40 x 30 (Pillow and TensorFlow
    decode the frame at its own size)."""
    data = bytearray(_encode(40, 30, "GIF"))
    data[6:10] = struct.pack("<HH", 1, 1)
    return bytes(data)


def test_a_gif_frame_larger_than_its_screen_is_read_at_its_own_size():
    data = _gif_frame_larger_than_its_screen()
    assert tf.io.decode_image(data, channels=3, expand_animations=False).shape[:2] == (30, 40)
    assert _both(data) == ((1, 30, 40), [1, 30, 40])


def test_every_frame_of_an_animation_counts():
    frames = [Image.new("RGB", (20, 10), (50 * i, 0, 0)) for i in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], optimize=False)
    data = buf.getvalue()
    assert tf.io.decode_gif(data).shape == (3, 10, 20, 3)  # libgif reads every frame
    assert _both(data) == ((3, 10, 20), [3, 10, 20])


@pytest.mark.parametrize("junk", [b"\xff\x00", b"\x00\x00\x00", b"\xff\xff\xff"])
def test_a_jpeg_with_bytes_before_a_marker_reads_as_libjpeg_does(junk):
    # after APP0 (bytes 2 + 2 + 16 = 20): a stuffed zero, stray bytes, fill bytes
    clean = _encode(130, 70, "JPEG")
    data = clean[:20] + junk + clean[20:]
    assert tf.io.decode_image(data, channels=3).shape[:2] == (70, 130)
    assert _both(data) == ((1, 70, 130), [1, 70, 130])


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG signature and IHDR chunk claiming `width` x `height` (RGB, 8 bits), then one
    empty IDAT: a few dozen bytes that `decode_image` would allocate the whole image for."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b""))


@pytest.mark.parametrize(
    "data",
    [b"", b"\x89PNG", b"GIF8", b"BM", b"RIFF\0\0\0\0WEBP", b"\xff\xd8\xff", b"plain text"],
    ids=["empty", "png_cut", "gif_cut", "bmp_cut", "webp_cut", "jpeg_cut", "text"],
)
def test_a_header_cut_short_or_unknown_reads_as_nothing_in_python(data):
    assert header_shape(data) == (0, 0, 0)


@pytest.mark.parametrize(
    "data", [b"", b"\x89PNG", b"GIF8", b"BM", b"RIFF\0\0\0\0WEBP", b"plain text"]
)
def test_a_header_cut_short_or_unknown_reads_as_nothing_in_the_graph(data):
    assert image_header.image_shape(tf.constant(data)).numpy().tolist() == [0, 0, 0]


def test_a_claimed_size_is_read_without_decoding():
    data = _png_claiming(20000, 20000)
    assert _both(data) == ((1, 20000, 20000), [1, 20000, 20000])


def _write(path, records: list[bytes]) -> str:
    path.write_bytes(b"".join(tfrecord_frame(r) for r in records))
    return str(path)


def _imagenet_files(folder, big: bytes) -> str:
    """Train and validation files of 4 records, labels 0-3; record 2's image is `big`, the
    others 16 x 16 JPEGs (256 pixels)."""
    records = [
        imagenet_example(encoded=big if k == 3 else _encode(16, 16, "JPEG"), height=16,
                         width=16, label=k, synset=f"n{k}", text="", filename=f"{k}.JPEG")
        for k in range(1, 5)
    ]  # fmt: skip
    _write(folder / "train-00000-of-00001", records)
    return _write(folder / "validation-00000-of-00001", records)


def _error(ds, n: int) -> tf.errors.InvalidArgumentError:
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        list(ds.take(n).as_numpy_iterator())
    return caught.value


def test_the_default_bound_is_the_builders():
    assert ReadSpec(batch_size=1, training=False).max_pixels == DEFAULT_MAX_PIXELS == 64_000_000


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "9"])
def test_a_bad_bound_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match=f"max_pixels must be None or a positive int, got {bad!r}"):
        ReadSpec(batch_size=1, training=False, max_pixels=bad)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_an_image_claiming_more_than_the_default_is_named_before_decoding(tmp_path, training):
    path = _imagenet_files(tmp_path, _png_claiming(20000, 20000))
    path = path if not training else str(tmp_path / "train-00000-of-00001")
    ds = imagenet_dataset(
        tmp_path, "train" if training else "validation", training=training, batch_size=1,
        image_size=16, seed=0 if training else None, shuffle_buffer=1,
    )  # fmt: skip
    line, code = known_error(_error(ds, 4), command="eval")
    # 20000 * 20000 = 400,000,000 pixels; without the bound: "undecodable image 3.JPEG ..."
    assert (line, code) == (
        f"cvbench eval: error: image 3.JPEG (record 2 of {path}) is 20000 x 20000 = "
        "400,000,000 pixels, over the limit of 64,000,000 (max_pixels, --max-pixels); "
        "pass --skip-corrupt to skip corrupt records",
        1,
    )


@pytest.mark.parametrize("batch_size", [1, 3])
def test_an_image_over_a_given_bound_is_skipped_and_counted(tmp_path, batch_size, capfd):
    # record 2's image: 32 x 20 = 640 pixels, over 600; the others 16 x 16 = 256
    _imagenet_files(tmp_path, _encode(32, 20, "PNG"))
    counter = CorruptRecordCounter()
    ds = imagenet_dataset(
        tmp_path, "validation", training=False, batch_size=batch_size, image_size=16,
        skip_corrupt=True, corrupt_counter=counter, max_pixels=600,
    )  # fmt: skip
    labels = [
        (int(label), float(weight))
        for _, labels, weights in ds.as_numpy_iterator()
        for label, weight in zip(labels, weights, strict=True)
    ]
    # labels 0, 1, 3 weighed once; padding rows (label 0, weight 0) fill the steps counted
    # from the 4 records: ceil(4 / batch_size) batches, 4 rows at batch 1, 6 at batch 3
    real = [(0, 1.0), (1, 1.0), (3, 1.0)]
    rows = -(-4 // batch_size) * batch_size
    assert labels == real + [(0, 0.0)] * (rows - len(real))
    assert counter.count == 1
    assert (
        "is 20 x 32 = 640 pixels, over the limit of 600 (max_pixels, --max-pixels)"
        in capfd.readouterr().err
    )


def test_no_bound_reads_every_image(tmp_path):
    _imagenet_files(tmp_path, _encode(32, 20, "PNG"))
    ds = imagenet_dataset(
        tmp_path, "validation", training=False, batch_size=4, image_size=16, max_pixels=None
    )
    (_, labels, weights), = ds.as_numpy_iterator()  # fmt: skip
    assert labels.tolist() == [0, 1, 2, 3] and weights.tolist() == [1.0] * 4


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_coco_bounds_its_images_too(tmp_path, training):
    obj = CocoObject(1, "person", (0.0, 0.0, 1.0, 1.0), False, 1.0)
    images = [CocoImage(i, f"{i}.jpg", 16, 16, (obj,)) for i in range(1, 5)]
    records = [
        coco_example(image, _encode(40 if image.image_id == 3 else 16, 16, "JPEG"))
        for image in images
    ]
    split = "coco_train.record" if training else "coco_val.record"
    path = _write(tmp_path / f"{split}-00000-of-00001", records)
    ds = coco.coco_dataset(
        tmp_path, "train" if training else "val", training=training, batch_size=1,
        image_size=32, shuffle_buffer=1, max_pixels=600,
    )  # fmt: skip
    line, _ = known_error(_error(ds, 8), command="train")
    # image 3: 40 x 16 = 640 pixels
    assert line.startswith(
        f"cvbench train: error: image 3.jpg (record 2 of {path}) is 16 x 40 = 640 pixels, "
        "over the limit of 600 (max_pixels, --max-pixels)"
    )


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_grain_bounds_its_images_too(tmp_path, training):
    path = _imagenet_files(tmp_path, _png_claiming(20000, 20000))
    path = path if not training else str(tmp_path / "train-00000-of-00001")
    data = imagenet_grain_dataset(
        tmp_path, "train" if training else "validation", batch_size=1, training=training,
        image_size=16, seed=0, num_classes=4,
    )  # fmt: skip
    with pytest.raises(BadFileError) as caught:
        list(zip(range(4), data, strict=False))
    assert f"{path} record 2 (3.JPEG): image is 20000 x 20000 = 400,000,000 pixels, " in str(
        caught.value
    )
    assert "over the limit of 64,000,000 (max_pixels, --max-pixels)" in str(caught.value)


@pytest.mark.parametrize("command", ["train", "eval", "benchmark"])
@pytest.mark.parametrize("flag, value", [([], DEFAULT_MAX_PIXELS), (["--max-pixels", "600"], 600)])
def test_the_commands_flag_reaches_the_read_spec(tmp_path, command, flag, value):
    import cvbench.cli as cli
    from cvbench.cli.task_args import task_from_args

    _imagenet_files(tmp_path, _encode(32, 20, "PNG"))
    extra = ["--checkpoint", "model.keras"] if command == "eval" else []  # parsed, not read
    args = cli.build_parser().parse_args(
        [command, "--model", "resnet18", "--data-dir", str(tmp_path), "--num-classes", "4"]
        + extra
        + flag
    )
    task = task_from_args(args)
    assert task.options.max_pixels == value
    if command == "benchmark":
        return
    # the spec every reader gets (`RecordTask.read`): record 2's 32 x 20 = 640 pixels is
    # refused at 600, read at the default
    from cvbench.training.distribution_base import SingleProcess

    ds = task.read("validation", batch_size=4, distribution=SingleProcess(), training=False)
    if value == 600:
        assert "over the limit of 600" in str(_error(ds, 1))
    else:
        assert len(list(ds.as_numpy_iterator())) == 1


def test_dali_refuses_a_bound_it_would_not_apply(tmp_path):
    from cvbench.tasks import ClassificationTask, TaskOptions

    options = TaskOptions(model="resnet18", data_dir=str(tmp_path), num_classes=4, max_pixels=600)
    with pytest.raises(ValueError, match=r"the DALI data backend does not support max_pixels"):
        ClassificationTask(options, data_backend="dali")


@pytest.mark.parametrize("reader", ["tf", "grain"])
def test_a_gif_frame_larger_than_its_screen_is_refused_by_both_readers(tmp_path, reader):
    # the frame: 30 x 40 = 1,200 pixels, over 600 (its 1 x 1 screen got past the bound)
    path = _imagenet_files(tmp_path, _gif_frame_larger_than_its_screen())
    if reader == "tf":
        ds = imagenet_dataset(
            tmp_path, "validation", training=False, batch_size=1, image_size=16, max_pixels=600
        )
        message = str(_error(ds, 4))
    else:
        data = imagenet_grain_dataset(
            tmp_path, "validation", batch_size=1, training=False, image_size=16,
            num_classes=4, max_pixels=600,
        )  # fmt: skip
        with pytest.raises(BadFileError) as caught:
            list(zip(range(4), data, strict=False))
        message = str(caught.value)
    assert f"{path}" in message and "record 2" in message
    assert "is 30 x 40 = 1,200 pixels, over the limit of 600 (max_pixels, --max-pixels)" in message


@pytest.mark.parametrize("max_pixels", [2**63, 10**23])
def test_a_bound_past_int64_reads_every_image(tmp_path, max_pixels):
    # the graph compares in int64: a bound past it (--max-pixels 99999999999999999999999)
    # was an OverflowError traceback; it bounds as 2**62 does, more than any image claims
    _imagenet_files(tmp_path, _png_claiming(20000, 20000))
    ds = imagenet_dataset(
        tmp_path, "validation", training=False, batch_size=4, image_size=16,
        max_pixels=max_pixels, skip_corrupt=True,
    )  # fmt: skip
    # the claimed PNG passes the bound and is skipped as undecodable (it holds no rows)
    (_, labels, weights), = ds.as_numpy_iterator()  # fmt: skip
    assert weights.tolist() == [1.0, 1.0, 1.0, 0.0]
