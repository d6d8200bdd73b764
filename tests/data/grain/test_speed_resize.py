"""`augment.resize_bilinear`'s speed-minded mechanics: temporaries reused per thread
(`_Scratch`), the output written into a given slot (`out=`), the two row paths (a view of
the band, or only the rows used for a large reduction), each still TensorFlow's arithmetic
bit for bit."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest

from cvbench.data.grain.augment import _Scratch, resize_bilinear

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic


def _image(seed: int, height: int, width: int, dtype=np.uint8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    return (rng.random((height, width, 3)) * 255).astype(dtype)


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize(
    ("shape", "window", "size"),
    [
        # more than 2x smaller in height: only the rows used are gathered (np.unique path)
        ((375, 500), (0, 0, 375, 500), (60, 80)),
        ((300, 40), (10, 3, 250, 30), (17, 90)),
        # under 2x: the band of rows is a view
        ((375, 500), (40, 90, 300, 320), (224, 224)),
        ((50, 60), (5, 7, 20, 30), (224, 224)),  # enlarging
    ],
)
def test_both_row_paths_are_tensorflows_bit_for_bit(tf, pp, shape, window, size, flip):
    image = _image(4, *shape)
    top, left, h, w = window
    crop = image[top : top + h, left : left + w]
    crop = crop[:, ::-1] if flip else crop
    expected = pp.resize(tf.cast(crop, tf.float32), size).numpy()
    got = resize_bilinear(image, size, window=window, flip=flip)
    assert got.dtype == np.float32 and np.array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_float_image_is_resized_from_its_float32_values(tf, pp, dtype):
    image = _image(5, 90, 70, dtype)
    expected = pp.resize(tf.cast(image, tf.float32), (40, 33)).numpy()
    assert np.array_equal(resize_bilinear(image, (40, 33)), expected)


def test_out_receives_the_result_and_a_wrong_out_is_refused():
    image = _image(6, 75, 100)
    batch = np.full((3, 24, 24, 3), -1.0, np.float32)
    got = resize_bilinear(image, (24, 24), window=(3, 4, 60, 80), out=batch[1])
    assert got is batch[1] or np.shares_memory(got, batch)
    assert np.array_equal(batch[1], resize_bilinear(image, (24, 24), window=(3, 4, 60, 80)))
    assert (batch[0] == -1).all() and (batch[2] == -1).all()  # the other slots untouched
    for bad in (
        np.zeros((24, 24, 3), np.float64),  # dtype
        np.zeros((24, 23, 3), np.float32),  # shape
        np.zeros((24, 48, 3), np.float32)[:, ::2],  # not contiguous
    ):
        with pytest.raises(ValueError, match="out must be C-contiguous float32"):
            resize_bilinear(image, (24, 24), out=bad)


def test_temporaries_are_reused_not_allocated_per_call():
    """After a first call, a 375 x 500 crop resized to 224 x 224 allocates the output, the
    upper rows' gather and the lower rows' (3 x 224 x 672 float32 = 3 x 602,112 bytes), not
    the band's along-x arrays (375 x 672 float32, 1 MB each, and the uint8 gathers), as a
    NumPy expression per step did (its peak was 6.4 times the output)."""
    image = _image(7, 375, 500)
    window = (0, 0, 375, 500)
    resize_bilinear(image, (224, 224), window=window)  # fills this thread's scratch
    output = 224 * 224 * 3 * 4
    tracemalloc.start()
    try:
        resize_bilinear(image, (224, 224), window=window)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 3 * output + 64 * 1024, peak / output


def test_threads_resizing_at_once_each_get_their_own_scratch():
    images = [_image(10 + k, 200 + 40 * k, 300 - 30 * k) for k in range(2)]
    expected = [resize_bilinear(im, (64, 64)) for im in images]
    results: list[list[bool]] = [[], []]
    start = threading.Barrier(2)

    def work(k: int) -> None:
        start.wait()
        for _ in range(30):
            results[k].append(np.array_equal(resize_bilinear(images[k], (64, 64)), expected[k]))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [[True] * 30, [True] * 30]


def test_scratch_reuses_a_buffer_by_name_up_to_its_limit():
    scratch = _Scratch()
    a = scratch.array("a", (10, 4), np.float32)
    b = scratch.array("a", (20,), np.int16)  # 40 bytes <= the 160 kept: the same memory
    assert np.shares_memory(a, b) and b.shape == (20,) and b.dtype == np.int16
    c = scratch.array("a", (100,), np.float32)  # larger: a new buffer, kept from now on
    assert not np.shares_memory(a, c) and np.shares_memory(c, scratch.array("a", (5,), np.uint8))
    assert not np.shares_memory(c, scratch.array("other", (5,), np.uint8))
    big = (_Scratch.LIMIT + 1,)  # over the limit: never kept
    assert not np.shares_memory(
        scratch.array("big", big, np.uint8), scratch.array("big", big, np.uint8)
    )
    assert "big" not in scratch.buffers
