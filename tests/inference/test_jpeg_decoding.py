"""JPEG files in inference decode as the model's training pipeline decoded them: with the
file's `dct_method` and `fancy_upscaling`, the pixels of `tf.io.decode_jpeg` (what the
tf.data pipelines run), not Pillow's, which differ by a few levels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from inference_models import classifier_info
from PIL import Image

from cvbench.inference.images import ImageFileError, iter_batches, read_image
from cvbench.utils.model_file import DCT_METHODS, ModelInfo

pytestmark = pytest.mark.backend_agnostic  # decoding needs no TensorFlow; the check uses it

OPTIONS = [(dct, fancy) for dct in DCT_METHODS for fancy in (True, False)]


def _photo(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth colour ramps plus noise: the IDCTs and the chroma upsamplings all differ."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([128 + 100 * np.sin(x / 17), 128 + 100 * np.cos(y / 11), (x * y) % 256], -1)
    return np.clip(base + rng.normal(0, 20, (height, width, 3)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jpegs")
    files = []
    # chroma 4:4:4, 4:2:2, 4:2:0 (Pillow's default), odd sizes (partial MCUs), a grey one
    for i, (subsampling, (h, w)) in enumerate([(0, (33, 47)), (1, (375, 500)), (2, (61, 90))]):
        path = folder / f"{i}.jpg"
        Image.fromarray(_photo(h, w, i)).save(path, quality=90, subsampling=subsampling)
        files.append(path)
    grey = folder / "grey.jpg"
    Image.fromarray(_photo(40, 52, 9)[..., 0]).save(grey, quality=85)
    return [*files, grey]


@pytest.mark.parametrize(("dct", "fancy"), OPTIONS)
def test_jpeg_pixels_are_tensorflows_with_the_files_options(jpegs, dct, fancy):
    import tensorflow as tf

    info = dataclasses.replace(classifier_info(), dct_method=dct, fancy_upscaling=fancy)
    for path in jpegs:
        expected = tf.io.decode_jpeg(
            path.read_bytes(), channels=3, dct_method=dct, fancy_upscaling=fancy
        ).numpy()
        np.testing.assert_array_equal(read_image(path, info=info), expected, err_msg=str(path))


def test_the_options_matter_and_pillow_is_the_default_without_info(jpegs):
    # a test that would pass with any decoder proves nothing: the options give other pixels
    path = jpegs[2]  # 4:2:0
    fast = dataclasses.replace(classifier_info(), dct_method="INTEGER_FAST", fancy_upscaling=False)
    accurate = dataclasses.replace(classifier_info(), dct_method="INTEGER_ACCURATE")
    a, b = read_image(path, info=fast), read_image(path, info=accurate)
    assert np.abs(a.astype(int) - b).max() > 2
    with Image.open(path) as im:
        np.testing.assert_array_equal(read_image(path), np.asarray(im.convert("RGB")))


def test_batches_decode_with_the_models_info(jpegs):
    import tensorflow as tf

    info = dataclasses.replace(
        classifier_info(), image_size=(33, 47), resize="stretch", dct_method="INTEGER_FAST",
        fancy_upscaling=False,
    )  # fmt: skip
    batch = next(iter_batches([str(jpegs[0])], info, batch_size=1))
    # 33 x 47 is the file's own size: "stretch" leaves the decoded pixels as they are
    expected = tf.io.decode_jpeg(
        jpegs[0].read_bytes(), channels=3, dct_method="INTEGER_FAST", fancy_upscaling=False
    ).numpy()
    np.testing.assert_array_equal(batch.images[0], expected.astype(np.float32))


def test_a_jpeg_simplejpeg_refuses_goes_to_pillow(tmp_path, jpegs):
    # two stray bytes before the end-of-image marker: libjpeg warns ("extraneous bytes before
    # marker"), simplejpeg (strict) refuses, Pillow reads the image; a truncated file: both
    # refuse, one error naming the file
    trailing = tmp_path / "trailing.jpg"
    trailing.write_bytes(jpegs[0].read_bytes()[:-2] + b"\x00\x00\xff\xd9")
    with Image.open(trailing) as im:
        pillow = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(read_image(trailing, info=classifier_info()), pillow)
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(jpegs[1].read_bytes()[:2000])
    with pytest.raises(ImageFileError, match="truncated.jpg"):
        read_image(truncated, info=classifier_info())


def test_the_options_are_validated_and_default_to_tensorflows():
    info = ModelInfo(task="classification", class_names=("a",), image_size=(8, 8))
    assert (info.dct_method, info.fancy_upscaling) == ("", True)  # also a file's without them
    assert ModelInfo.from_dict({k: v for k, v in info.to_dict().items()
                                if k not in ("dct_method", "fancy_upscaling")}) == info  # fmt: skip
    with pytest.raises(ValueError, match="dct_method must be one of"):
        dataclasses.replace(info, dct_method="FLOAT")
    with pytest.raises(ValueError, match="fancy_upscaling must be a bool"):
        dataclasses.replace(info, fancy_upscaling=1)
