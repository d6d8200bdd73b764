"""The DALI path against tf.data's on the same records: label streams, the evaluation's
exact-once cover across ranks, evaluation pixels, the recipe checks, the missing extra."""

import sys

import numpy as np
import pytest
from dali_records import LAYOUT, write_records

from cvbench.data.dali.dataset import imagenet_dali_dataset
from cvbench.data.dali.pipeline import check_dali_preprocessing, imagenet_dali_pipeline, import_dali
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.imagenet import imagenet_dataset

SIZE = 32
# Validation records 0-based labels 6..10 (stored 7..11), 5 records over 2 files.
VAL_LABELS = [label - 1 for name, ls in LAYOUT.items() if name.startswith("val") for label in ls]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return write_records(tmp_path_factory.mktemp("records"))


def batches(ds, n=None):
    out = []
    for i, b in enumerate(ds):
        if n is not None and i == n:
            break
        out.append(tuple(np.asarray(part) for part in b))
    return out


def rows(batch_list):
    """{label: image} of the weight-1 rows, and the labels and weights in stream order."""
    images, labels, weights = {}, [], []
    for x, y, w in batch_list:
        for xi, yi, wi in zip(x, y, w, strict=True):
            labels.append(int(yi))
            weights.append(float(wi))
            if wi:
                images[int(yi)] = xi
    return images, labels, weights


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_evaluation_covers_each_record_once_like_tf_data(records, ranks):
    cover = []
    for rank in range(ranks):
        kw = dict(batch_size=2, image_size=SIZE, training=False, num_shards=ranks, shard_index=rank)
        dali = batches(imagenet_dali_dataset(records, "validation", num_threads=1, **kw))
        tf_ = batches(imagenet_dataset(records, "validation", **kw))
        # Same number of batches on every rank: ceil(ceil(5 / R) / 2) = 3, 2, 1 for R = 1, 2, 3.
        assert len(dali) == len(tf_) == {1: 3, 2: 2, 3: 1}[ranks]
        _, d_labels, d_weights = rows(dali)
        _, t_labels, t_weights = rows(tf_)
        real = sorted(y for y, w in zip(d_labels, d_weights, strict=True) if w)
        # The same records per rank (tf.data interleaves the rank's files, DALI reads them in
        # order: compared as sets); padding rows label 0, weight 0 in both.
        assert real == sorted(y for y, w in zip(t_labels, t_weights, strict=True) if w)
        assert sum(d_weights) == sum(t_weights)
        assert all(y == 0 for y, w in zip(d_labels, d_weights, strict=True) if not w)
        for x, _, w in dali:
            assert not x[w == 0].any()  # zero images for padding
        cover += real
    assert sorted(cover) == VAL_LABELS  # every record exactly once across the ranks


def test_rank_without_records_yields_padding_steps(records):
    # 5 records over 6 ranks: rank 5 gets records [25 // 6, 30 // 6) = [4, 5): one record;
    # with 7 ranks rank 0 gets [0, 5 // 7) = nothing, and still ceil(1 / 2) = 1 batch.
    ds = imagenet_dali_dataset(
        records,
        "validation",
        batch_size=2,
        image_size=SIZE,
        training=False,
        num_shards=7,
        shard_index=0,
        num_threads=1,
    )
    ((x, y, w),) = batches(ds)
    assert len(ds) == 1 and not w.any() and not y.any() and not x.any()


@pytest.mark.parametrize(
    ("preprocessing", "atol"),
    [
        # DALI's CPU decoder gives TensorFlow's INTEGER_ACCURATE pixels; DALI rounds the
        # resized image to uint8: <= 1 level / 57.12 (the smallest std) = 0.0175.
        (ImagePreprocessing(dct_method="INTEGER_ACCURATE"), 0.02),
        # TensorFlow's default fast IDCT differs by up to 4 levels on these images (measured
        # by decoding both ways): (4 + 1) / 57.12 = 0.0875.
        (None, 0.09),
    ],
)
def test_evaluation_images_match_tf_data(records, preprocessing, atol):
    kw = dict(batch_size=2, image_size=SIZE, training=False, preprocessing=preprocessing)
    dali, _, _ = rows(batches(imagenet_dali_dataset(records, "validation", num_threads=1, **kw)))
    tf_, _, _ = rows(batches(imagenet_dataset(records, "validation", **kw)))
    assert sorted(dali) == sorted(tf_) == VAL_LABELS
    for label in VAL_LABELS:
        assert dali[label].shape == (SIZE, SIZE, 3) and dali[label].dtype == np.float32
        np.testing.assert_allclose(dali[label], tf_[label], atol=atol)


@pytest.mark.parametrize("ranks", [1, 2])
def test_training_label_stream_equals_tf_data_unshuffled(records, ranks):
    # shuffle_buffer=1: no record shuffling. One file per rank (2 files, by-file sharding), so
    # tf.data's file shuffle has nothing to reorder; 2 ranks: rank 1 reads file 1.
    for rank in range(ranks):
        pattern = None if ranks == 2 else "train-00000-of-00002"
        kw = dict(
            batch_size=2,
            image_size=SIZE,
            training=True,
            seed=3,
            shuffle_buffer=1,
            num_shards=ranks,
            shard_index=rank,
            file_pattern=pattern,
        )
        dali = batches(imagenet_dali_dataset(records, "train", num_threads=1, **kw), 6)
        tf_ = batches(imagenet_dataset(records, "train", **kw), 6)
        d_labels = [y.tolist() for _, y in dali]
        assert d_labels == [y.tolist() for _, y in tf_]
        first = 3 * rank  # file r holds 0-based labels 3r, 3r + 1, 3r + 2, repeated
        assert sum(d_labels, []) == [first + i % 3 for i in range(12)]
        x = dali[0][0]
        assert x.shape == (2, SIZE, SIZE, 3) and x.dtype == np.float32


def test_training_fewer_files_than_ranks_splits_records(records):
    # 1 file of 3 records over 2 ranks: rank r keeps records r, r + 2 (0-based labels 0, 2 / 1).
    seen = []
    for rank in range(2):
        ds = imagenet_dali_dataset(
            records,
            "train",
            batch_size=1,
            image_size=SIZE,
            training=True,
            shuffle_buffer=1,
            num_shards=2,
            shard_index=rank,
            file_pattern="train-00000-of-00002",
            num_threads=1,
        )
        seen.append([int(y[0]) for _, y in batches(ds, 4)])
    assert seen == [[0, 2, 0, 2], [1, 1, 1, 1]]


def test_seeded_training_stream_repeats_and_shuffles(records):
    ds = imagenet_dali_dataset(
        records, "train", batch_size=3, image_size=SIZE, training=True, seed=5, num_threads=1
    )
    a, b = batches(ds, 4), batches(ds, 4)  # two iterations: the same stream (resume relies on it)
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(ya, yb)
        np.testing.assert_array_equal(xa, xb)
    labels = sum((y.tolist() for _, y in a), [])
    assert set(labels) <= set(range(6))
    assert labels != [i % 6 for i in range(12)]  # shuffled


def test_dtypes(records):
    for dtype, expected in (("float16", np.float16), ("bfloat16", "bfloat16")):
        ds = imagenet_dali_dataset(
            records,
            "validation",
            batch_size=2,
            image_size=SIZE,
            training=False,
            dtype=dtype,
            num_threads=1,
        )
        x, _, _ = next(iter(ds))
        assert x.dtype == np.dtype(expected)


def test_pipeline_outputs(records):
    pipe = imagenet_dali_pipeline(
        records, "validation", batch_size=4, image_size=SIZE, training=False, num_threads=1
    )
    images, labels, weights = (np.array(o.as_tensor()) for o in pipe.run())
    assert images.shape == (4, SIZE, SIZE, 3) and labels.dtype == np.int32
    # The 5 records in file order; DALI's reader pads with the last one.
    assert labels.tolist() == VAL_LABELS[:4] and weights.tolist() == [1.0] * 4
    _, labels, weights = (np.array(o.as_tensor()) for o in pipe.run())
    assert labels.tolist() == [10, 10, 10, 10] and weights.tolist() == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("resize_method", "bicubic"),
        ("eval_crop", "crop_then_resize"),
        ("quantize_uint8", True),
        ("fancy_upscaling", False),
    ],
)
def test_unsupported_recipe_knobs_are_named(knob, value):
    with pytest.raises(ValueError, match=f"supports only {knob}=.*got {knob}={value!r}"):
        check_dali_preprocessing(ImagePreprocessing(**{knob: value}))


def test_bad_arguments(records):
    kw = dict(batch_size=2, training=False, num_threads=1)
    with pytest.raises(ValueError, match="device must be one of .*got 'gpu'"):
        imagenet_dali_pipeline(records, "validation", device="gpu", **kw)
    with pytest.raises(ValueError, match="dtype must be one of .*got 'int8'"):
        imagenet_dali_dataset(records, "validation", dtype="int8", **kw)
    with pytest.raises(FileNotFoundError, match="cvbench dali-index"):
        imagenet_dali_dataset(records, "validation", index_dir=records / "nowhere", **kw)


def test_missing_dali_names_the_extra(monkeypatch, records):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # import nvidia.dali now fails
    with pytest.raises(ImportError, match=r"pip install 'cvbench\[dali\]'"):
        import_dali()
    with pytest.raises(ImportError, match=r"cvbench\[dali\]"):
        imagenet_dali_dataset(records, "validation", batch_size=2, training=False)


def test_label_outside_num_classes_is_named(records):
    # Validation labels are 0-based 6..10: with 8 classes label 8 (stored 9) is the first bad.
    ds = imagenet_dali_dataset(
        records,
        "validation",
        batch_size=4,
        image_size=SIZE,
        training=False,
        num_classes=8,
        num_threads=1,
    )
    with pytest.raises(ValueError, match=r"label 8 of a record of .* outside \[0, 8\)"):
        batches(ds)
