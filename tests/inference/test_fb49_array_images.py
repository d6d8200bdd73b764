"""Array images are RGB in [0, 255] as they are; one whose values say otherwise is named
(probe fb49 #2). A float array in [0, 1] (matplotlib's `imread`, `skimage.img_as_float`,
torchvision's `ToTensor`) was classified as a near-black image and a uint16 array of 0..65535
went in raw, with no word; complex arrays were cast with only numpy's `ComplexWarning`, and
NaN / inf arrays gave NaN scores. Now: one `UserWarning` per call naming the first such image
and its range, and NaN / inf, complex and non-number arrays refused naming the image."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import tensorflow as tf
from inference_models import channel_classifier, classifier_info, constant_detector, detector_info

from cvbench.inference.classification import classify
from cvbench.inference.detection import detect
from cvbench.inference.images import array_range_warning

pytestmark = pytest.mark.backend_agnostic

_HINT_01 = "multiply it by 255"
_HINT_WIDE = "scale it (a 16-bit image by 255 / 65535)"


def _image(means, dtype=np.float32, size=8):
    return np.broadcast_to(np.asarray(means, dtype), (size, size, 3)).copy()


def _classify(images, batch_size=4):
    return classify(channel_classifier(), images, info=classifier_info(), batch_size=batch_size)


def _detect(images, batch_size=4):
    return detect(constant_detector(), images, info=detector_info(), batch_size=batch_size)


def _run_quietly(run, images, batch_size):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails
        return run(images, batch_size=batch_size)


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("run", [_classify, _detect], ids=["classify", "detect"])
def test_a_float_batch_in_0_1_warns_once_naming_the_first_image(run, batch_size):
    batch = np.stack([_image((0.1, 0.3, 0.2)), _image((0.5, 0.25, 1.0)), _image((0, 0, 0.5))])
    with pytest.warns(UserWarning) as caught:
        results = run(batch, batch_size=batch_size)
    assert len(results) == 3  # read as they are: the warning is the only change
    assert [str(w.message) for w in caught] == [
        "image 0: float32 values in [0.1, 0.3]: arrays are read as RGB in [0, 255], as "
        "they are; a [0, 1] image (matplotlib's imread, skimage's img_as_float, "
        f"torchvision's ToTensor) is nearly black so: {_HINT_01}"
    ]


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("run", [_classify, _detect], ids=["classify", "detect"])
def test_a_16_bit_image_in_a_list_is_named_by_its_index(run, batch_size):
    images = [_image((10, 30, 20), np.uint16), _image((0, 65535, 300), np.uint16, size=5)]
    with pytest.warns(UserWarning) as caught:
        run(images, batch_size=batch_size)
    assert [str(w.message) for w in caught] == [
        "image 1: uint16 values in [0, 65535]: arrays are read as RGB in [0, 255], as they "
        f"are; values outside it are out of range: {_HINT_WIDE}"
    ]


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("run", [_classify, _detect], ids=["classify", "detect"])
def test_arrays_in_0_255_are_read_without_a_word(run, batch_size):
    images = [
        _image((10, 30, 20)),  # float32 in [0, 255], as keras.utils.img_to_array gives
        _image((0, 128, 255), np.uint8),
        _image((0, 255, 2), np.int64),
        _image((0, 0, 0)),  # black in [0, 1] and in [0, 255] alike
        _image((1.5, 0.5, 0), np.float64),  # its largest value over 1
    ]
    assert len(_run_quietly(run, images, batch_size)) == 5


def test_scores_are_those_of_the_array_as_it_is():
    # Channel means (0.1, 0.3, 0.2) -> logits (0.01, 0.03, 0.02): softmax of them, as
    # documented ([0, 255] as they are), warned about but unchanged.
    with pytest.warns(UserWarning):
        (result,) = _classify(_image((0.1, 0.3, 0.2)))
    z = math.exp(0.01) + math.exp(0.03) + math.exp(0.02)
    assert result.class_ids == (1, 2, 0)
    expected = [math.exp(0.03) / z, math.exp(0.02) / z, math.exp(0.01) / z]
    np.testing.assert_allclose(result.scores, expected, rtol=1e-5)


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("run", [_classify, _detect], ids=["classify", "detect"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_infinite_pixels_are_refused_naming_the_image(run, bad, batch_size):
    batch = np.stack([_image((10, 30, 20)), _image((10, 30, 20))])
    batch[1, 2, 3, 1] = bad
    with pytest.raises(ValueError) as caught:
        run(batch, batch_size=batch_size)
    assert str(caught.value) == (
        "image 1: NaN or infinite pixel values (the first at (2, 3, 1)); an image array must "
        "hold finite RGB values in [0, 255]"
    )


@pytest.mark.parametrize("run", [_classify, _detect], ids=["classify", "detect"])
@pytest.mark.parametrize(
    ("image", "what"),
    [
        (_image((10, 30, 20), np.complex64), "complex numbers"),
        (_image((1, 0, 1), np.bool_), "bool values, not numbers"),
        (_image(("1", "2", "3"), np.str_), "<U1 values, not numbers"),
    ],
    ids=["complex", "bool", "str"],
)
def test_complex_and_non_number_arrays_are_refused(run, image, what):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning first
        with pytest.raises(ValueError) as caught:
            run([_image((10, 30, 20)), image], batch_size=1)
    expected = f"image 1: an image array of {what}; give real RGB in [0, 255]"
    assert str(caught.value) == expected


def test_a_dataset_of_0_1_images_warns_too():
    # tf.image.convert_image_dtype gives [0, 1] floats: dataset images are arrays here.
    dataset = tf.data.Dataset.from_tensor_slices(np.stack([_image((0.2, 0.4, 0.6))] * 2))
    with pytest.warns(UserWarning, match=r"^image 0: float32 values in \[0.2, 0.6\]"):
        assert len(_classify(dataset)) == 2


def test_negative_values_are_out_of_range():
    message = array_range_warning(4, _image((-1, 0, 127), np.int8))
    assert message.startswith("image 4: int8 values in [-1, 127]: ")
    assert message.endswith(_HINT_WIDE)
