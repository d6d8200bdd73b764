"""The synthetic batch has bounds of its own, checked before anything is allocated: an image
side over 8192 (`--image-size`'s bound), float32 images over 16 GiB, more classes than int32
labels hold, and a seed or steps that are no ints, each a `ValueError` naming the value (a
batch of hundreds of GiB ended in a MemoryError or the OOM killer)."""

from __future__ import annotations

import numpy as np
import pytest

import cvbench.data.read.synthetic as synthetic
from cvbench.data.read.synthetic import synthetic_arrays, synthetic_batches
from cvbench.tasks.recipes.resolve import MAX_IMAGE_SIZE

pytestmark = pytest.mark.backend_agnostic


def test_the_side_bound_is_the_runs():
    assert synthetic.MAX_SYNTHETIC_SIDE == MAX_IMAGE_SIZE == 8192
    with pytest.raises(ValueError, match="^image_size 8193 is over 8192, the largest of a synth"):
        synthetic_arrays(1, 8193)


@pytest.mark.parametrize(
    ("batch_size", "shown"),
    [
        # 22 * 8192 * 8192 * 3 channels * 4 bytes = 17716740096 bytes = 16.5 GiB; 21 is 15.75
        (22, "16.5 GiB"),
        # 1e6 * 8192^2 * 12 = 8.05e17 bytes = 732.4 TiB
        (10**6, "732.4 TiB"),
    ],
)
def test_a_batch_over_16_gib_is_refused_naming_it(batch_size, shown):
    expected = (
        f"batch_size {batch_size} of 8192x8192 images needs {shown} of float32, over 16.0 GiB, "
        "the largest synthetic batch: pass a smaller batch_size or image_size"
    )
    for make in (synthetic_arrays, synthetic_batches):  # batches: at the call, not at next()
        with pytest.raises(ValueError) as error:
            make(batch_size, 8192)
        assert str(error.value) == expected


def test_the_byte_bound_is_inclusive(monkeypatch):
    # 2 images of 4x4x3 float32 are 2 * 48 * 4 = 384 bytes: taken at a bound of 384, 3 (576)
    # refused
    monkeypatch.setattr(synthetic, "MAX_SYNTHETIC_BYTES", 384)
    images, labels = synthetic_arrays(2, 4, 3)
    assert images.nbytes == 384 and labels.shape == (2,)
    with pytest.raises(ValueError, match="^batch_size 3 of 4x4 images needs 576 bytes of float32"):
        synthetic_arrays(3, 4, 3)


def test_the_synthetic_dataset_is_bounded_too():
    from cvbench.data import synthetic_dataset

    with pytest.raises(ValueError, match="^batch_size 100 of 8192x8192 images needs 75.0 GiB"):
        synthetic_dataset(100, 8192)  # 100 * 8192^2 * 12 bytes = 75 GiB


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 2**31}, "num_classes 2147483648 is over 2147483647"),  # int32 labels
        ({"seed": -1}, "seed must be an int >= 0, got -1"),
        ({"seed": 1.5}, "seed must be an int >= 0, got 1.5"),
        ({"image_size": np.float64(8.0)}, r"image_size must be a positive int, got np.float64"),
    ],
)
def test_other_bad_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        synthetic_arrays(2, **{"image_size": 8, **kwargs})


@pytest.mark.parametrize("steps", [-1, 2.0, float("nan"), "3", True])
def test_steps_are_an_int_or_none(steps):
    with pytest.raises(ValueError, match=r"^steps must be an int >= 0 or None, got "):
        synthetic_batches(2, 8, steps=steps)
    assert len(list(synthetic_batches(2, 8, steps=np.int64(2)))) == 2
    assert list(synthetic_batches(2, 8, steps=0)) == []
