"""`imagenet_dataset(..., preprocessing=...)` and `tfds_dataset(..., preprocessing=...)`: the
knobs reach training and evaluation, evaluation still covers every record exactly once, and a
knob given with a custom preprocess hook (which would ignore it) is an error."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from imagenet_testdata import NUM_TRAIN_RECORDS, NUM_VAL_RECORDS, make_raw

from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.read.image_preprocessing import ImagePreprocessing

SIZE = 32
# Training crops that are the whole image (area exactly 1; the tiny set's images are 40 x 56
# or 56 x 40, aspect 1.4 or 0.714), no flip, evaluation without a crop (central_crop(1.0)
# then the same bilinear resize): a training image is then exactly the evaluation image of
# the same record. Scaled to [-1, 1].
WHOLE = ImagePreprocessing(
    area_range=(1.0, 1.0),
    aspect_ratio_range=(0.7, 1.43),
    flip=False,
    eval_crop="crop_then_resize",
    crop_fraction=1.0,
    input_scaling="inception",
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("knobs")
    raw = make_raw(root / "raw")
    build_imagenet(
        root / "raw",
        root / "out",
        train_shards=2,
        val_shards=2,
        validation_labels=root / "raw" / "val_labels.txt",
        num_workers=1,
        progress=False,
    )
    return raw, root / "out"


def _dataset(data_dir, split, **kwargs):
    from cvbench.data import imagenet_dataset

    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("image_size", SIZE)
    kwargs.setdefault("num_shards", 1)
    kwargs.setdefault("shard_index", 0)
    if kwargs["training"]:
        kwargs.setdefault("shuffle_buffer", 16)
    return imagenet_dataset(data_dir, split, **kwargs)


def _eval_rows(ds):
    rows = Counter()
    for images, labels, weights in ds.as_numpy_iterator():
        for image, label, weight in zip(images, labels, weights, strict=True):
            if weight == 1.0:
                rows[np.round(image, 3).tobytes(), int(label)] += 1
    return rows


def test_training_and_evaluation_use_the_knobs(data):
    _, out = data
    train = _dataset(
        out, "train", training=True, batch_size=5, repeat=False, seed=0, preprocessing=WHOLE
    )
    rows = Counter()
    for images, labels in train.as_numpy_iterator():
        assert images.min() >= -1.0 and images.max() <= 1.0  # x / 127.5 - 1
        for image, label in zip(images, labels, strict=True):
            rows[np.round(image, 3).tobytes(), int(label)] += 1
    assert sum(rows.values()) == NUM_TRAIN_RECORDS
    # The same records through evaluation (every record once) give the same images.
    evaluated = _eval_rows(_dataset(out, "train", training=False, preprocessing=WHOLE))
    assert rows == evaluated
    # Without the knobs the training crops are random and the scaling mean/std: different.
    default = _dataset(out, "train", training=True, batch_size=5, repeat=False, seed=0)
    images = np.concatenate([x for x, _ in default.as_numpy_iterator()])
    assert images.min() < -1.5


def test_evaluation_with_knobs_covers_each_record_once(data, tf):
    raw, out = data
    nvcnn = ImagePreprocessing.nvcnn_inception_v3()
    ds = _dataset(out, "validation", training=False, preprocessing=nvcnn)
    weights = np.concatenate([w for _, _, w in ds.as_numpy_iterator()])
    assert weights.sum() == NUM_VAL_RECORDS and int(ds.cardinality()) == 2  # ceil(6 / 4)
    # Each evaluation image is nvcnn's evaluation preprocessing of one validation file.
    from cvbench.data.read.preprocessing import preprocess_for_eval

    expected = Counter()
    for path in sorted((raw.root / "validation").glob("*.JPEG")):
        image = preprocess_for_eval(
            tf.constant(path.read_bytes()), image_size=SIZE, preprocessing=nvcnn
        ).numpy()
        expected[np.round(image, 3).tobytes(), raw.labels[path.name] - 1] += 1
    assert _eval_rows(ds) == expected
    assert expected != _eval_rows(_dataset(out, "validation", training=False))
    # Split across 2 ranks: still every record exactly once.
    per_rank = Counter()
    for rank in range(2):
        per_rank += _eval_rows(
            _dataset(
                out,
                "validation",
                training=False,
                num_shards=2,
                shard_index=rank,
                preprocessing=nvcnn,
            )
        )
    assert per_rank == expected


def test_knobs_with_a_custom_hook_or_of_the_wrong_type_are_errors(data):
    _, out = data

    def hook(*args):
        return args[0]

    with pytest.raises(ValueError, match="train_preprocess replaces the whole preprocessing"):
        _dataset(out, "train", training=True, preprocessing=WHOLE, train_preprocess=hook)
    with pytest.raises(ValueError, match="eval_preprocess replaces the whole preprocessing"):
        _dataset(out, "validation", training=False, preprocessing=WHOLE, eval_preprocess=hook)
    with pytest.raises(ValueError, match="got 'inception'"):
        _dataset(out, "validation", training=False, preprocessing="inception")
    # The hook of the other mode does not conflict: evaluation ignores train_preprocess.
    ds = _dataset(out, "validation", training=False, preprocessing=WHOLE, train_preprocess=hook)
    assert int(ds.cardinality()) == 2


def test_tfds_pipelines_use_the_knobs():
    import tensorflow_datasets as tfds

    from cvbench.data import tfds_dataset

    common = {"batch_size": 4, "image_size": 32, "num_shards": 1, "shard_index": 0}
    inception = ImagePreprocessing(input_scaling="inception")
    with tfds.testing.mock_data(num_examples=6):
        for training in (True, False):
            extra = {"seed": 0, "shuffle_buffer": 8} if training else {}
            split = "train" if training else "validation"
            scaled = tfds_dataset(
                "imagenet2012", split, training=training, preprocessing=inception, **common, **extra
            )
            default = tfds_dataset("imagenet2012", split, training=training, **common, **extra)
            a = np.concatenate([b[0] for b in scaled.take(2).as_numpy_iterator()])
            b = np.concatenate([b[0] for b in default.take(2).as_numpy_iterator()])
            # Random mock pixels span 0..255: [-1, 1] scaled, about [-2.1, 2.6] by default.
            assert a.min() >= -1.0 and a.max() <= 1.0 and a.min() < -0.9
            assert b.min() < -1.5
        with pytest.raises(ValueError, match="eval_preprocess replaces"):
            tfds_dataset(
                "imagenet2012",
                "validation",
                training=False,
                preprocessing=inception,
                eval_preprocess=lambda image: image,
                **common,
            )
