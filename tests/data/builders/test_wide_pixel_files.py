"""One decoding rule for image files wider than 8 bits (F5): `build-imagenet` and `build-coco`
stored float TIFFs in [0, 1] and int32 images in [0, 255] as black images (their `to_rgb`:
`v / 256`, truncated) while `predict` / `classify` (`read_image`) read them as the grey they
are. The records now hold `read_image`'s pixels, for every mode."""

from __future__ import annotations

import io

import numpy as np
import pytest
from imagenet_testdata import encode, smooth_image
from PIL import Image

from cvbench.data import image_io
from cvbench.data.builders.coco_builder import CocoItem, encode_coco_item
from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.coco_schema import CocoImage
from cvbench.data.grain.records import parse_example, parse_features
from cvbench.data.tfrecord import iter_tfrecord
from cvbench.inference import images

pytestmark = pytest.mark.backend_agnostic

HEIGHT, WIDTH = 12, 16


def _flat(value, dtype) -> np.ndarray:
    return np.full((HEIGHT, WIDTH), value, dtype)


# file name -> (the file's bytes, the grey level `read_image` gives: the documented rule).
FILES = {
    # float in [0, 1]: 0.5 * 255 = 127.5 -> 128 (the builders stored 0)
    "f32.tiff": (encode(_flat(0.5, np.float32), "TIFF"), 128),
    # int32 all in [0, 255]: kept (the builders stored 200 / 256 -> 0)
    "i32.tiff": (encode(_flat(200, np.int32), "TIFF"), 200),
    # unsigned 16-bit ("I;16"): 65280 * 255 / 65535 = 254.004 -> 254 (the builders: 65280 // 256
    # = 255)
    "u16.png": (encode(_flat(65280, np.uint16), "PNG"), 254),
    # 8-bit grey ("L")
    "l.png": (encode(_flat(77, np.uint8), "PNG"), 77),
}
RGB_JPEG = encode(smooth_image(3, HEIGHT, WIDTH), "JPEG", quality=95)


def _pixels(encoded: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))


def _write(folder) -> dict[str, object]:
    folder.mkdir(parents=True)
    paths = {}
    for name, (data, _) in FILES.items():
        (folder / name).write_bytes(data)
        paths[name] = folder / name
    (folder / "rgb.jpg").write_bytes(RGB_JPEG)
    paths["rgb.jpg"] = folder / "rgb.jpg"
    return paths


def _check(name, path, stored: np.ndarray) -> None:
    expected = images.read_image(path)
    assert stored.shape == expected.shape == (HEIGHT, WIDTH, 3), name
    # The same pixels in the records and for predict: exact (a flat grey survives JPEG).
    assert np.array_equal(stored, expected), (name, stored[0, 0], expected[0, 0])
    if name in FILES:
        assert np.all(expected == FILES[name][1]), (name, expected[0, 0])


def test_build_imagenet_records_hold_the_pixels_read_image_gives(tmp_path):
    paths = _write(tmp_path / "raw" / "train" / "n01")
    summary = build_imagenet(
        tmp_path / "raw", tmp_path / "out", train_shards=1, num_workers=1, progress=False
    )
    assert summary.write.skipped == []
    seen = set()
    for record in iter_tfrecord(tmp_path / "out" / "train-00000-of-00001"):
        fields = parse_example(record)
        _check(fields["filename"], paths[fields["filename"]], _pixels(fields["encoded"]))
        seen.add(fields["filename"])
    assert seen == set(paths)


def test_build_coco_records_hold_the_pixels_read_image_gives(tmp_path):
    paths = _write(tmp_path / "images")
    for index, (name, path) in enumerate(sorted(paths.items())):
        item = CocoItem(str(path), CocoImage(index + 1, name, HEIGHT, WIDTH, ()))
        record = encode_coco_item(item, quality=90)
        assert isinstance(record, bytes), (name, record)
        (encoded,) = parse_features(record)["image/encoded"]
        _check(name, path, _pixels(encoded))


def _image(mode: str) -> Image.Image:
    """A 12 x 16 gradient in `mode`, the values spread over the mode's interesting range."""
    ramp = np.arange(HEIGHT * WIDTH, dtype=np.float64).reshape(HEIGHT, WIDTH) / (HEIGHT * WIDTH - 1)
    if mode == "F":  # [0, 1], a NaN and values outside (clipped)
        values = (ramp * 1.2 - 0.1).astype(np.float32)
        values[0, 0] = np.nan
        return Image.fromarray(values, mode="F")
    if mode == "I;16":
        return Image.fromarray((ramp * 65535).round().astype(np.uint16))
    if mode == "I;16B":
        return Image.fromarray((ramp * 65535).round().astype(np.uint16)).convert("I;16B")
    if mode.startswith("I "):  # "I 255", "I 65535", "I signed": int32 over that range
        scale = {"I 255": (0, 255), "I 65535": (0, 65535), "I signed": (-70000, 90000)}[mode]
        values = (scale[0] + ramp * (scale[1] - scale[0])).round().astype(np.int32)
        return Image.fromarray(values, mode="I")
    rgb = Image.fromarray(smooth_image(5, HEIGHT, WIDTH))
    if mode == "P":
        image = rgb.quantize(colors=16)
        image.info["transparency"] = 3
        return image
    return rgb.convert(mode)


@pytest.mark.parametrize(
    "mode",
    ["F", "I;16", "I;16B", "I 255", "I 65535", "I signed", "L", "RGB", "RGBA", "LA", "P", "CMYK"],
)
def test_the_builders_image_is_inferences_array(mode):
    # What the builders encode as JPEG (`to_rgb`) is what `read_image` returns for the file
    # (`to_rgb_array`), pixel for pixel, over gradients of every mode.
    image = _image(mode)
    built = np.asarray(image_io.to_rgb(image))
    assert built.dtype == np.uint8 and built.shape == (HEIGHT, WIDTH, 3)
    assert np.array_equal(built, images.to_rgb_array(image))


def test_inference_uses_the_builders_rule():
    assert images.to_rgb_array is image_io.to_rgb_array
