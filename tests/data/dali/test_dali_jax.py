"""The DALI path's JAX batches (`arrays="jax"`, DALI's JAX plugin) against its NumPy batches:
`jax.Array`s equal batch for batch for the same pipeline and seed, in training and in
evaluation with padding; the label check; the error without JAX.

Runs under both Keras backends: the JAX plugin hands out `jax.Array`s whatever the backend."""

import itertools
import sys

import jax
import numpy as np
import pytest
from dali_records import write_records

from cvbench.data.dali.dataset import imagenet_dali_dataset, import_dali_jax

pytestmark = pytest.mark.backend_agnostic

SIZE = 16


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return write_records(tmp_path_factory.mktemp("records"))


def both(records, split, n=None, **kw):
    """The first `n` batches (all with None) of the NumPy and the JAX path, same arguments."""
    kw = dict(batch_size=2, image_size=SIZE, seed=7, num_threads=1, **kw)
    out = []
    for arrays in ("numpy", "jax"):
        ds = imagenet_dali_dataset(records, split, arrays=arrays, **kw)
        out.append(list(itertools.islice(ds, n)))
    return out


def assert_equal_batches(numpy_batches, jax_batches):
    assert len(numpy_batches) == len(jax_batches)
    for nb, jb in zip(numpy_batches, jax_batches, strict=True):
        assert len(nb) == len(jb)
        for n, j in zip(nb, jb, strict=True):
            assert isinstance(j, jax.Array) and not isinstance(n, jax.Array)
            assert j.dtype == n.dtype and j.shape == n.shape
            np.testing.assert_array_equal(np.asarray(j), n)  # exact: the same pipeline


def test_training_jax_batches_equal_numpy(records):
    # 5 batches of 2 from the 6 training records: the seeded stream wraps into epoch 2.
    numpy_batches, jax_batches = both(records, "train", 5, training=True)
    assert_equal_batches(numpy_batches, jax_batches)
    assert all(0 <= y < 6 for _, ys in jax_batches for y in np.asarray(ys).tolist())


@pytest.mark.parametrize(
    ("ranks", "rank", "labels", "weights"),
    [
        # 1 rank: the 5 validation records (0-based 6..10) in file order, the last batch
        # padded with one row (label 0, weight 0).
        (1, 0, [[6, 7], [8, 9], [10, 0]], [[1, 1], [1, 1], [1, 0]]),
        # 2 ranks: rank 0 reads records [0, 5 // 2) = labels 6, 7 and still yields
        # ceil(ceil(5 / 2) / 2) = 2 batches: the second only padding.
        (2, 0, [[6, 7], [0, 0]], [[1, 1], [0, 0]]),
        # 7 ranks: rank 0 has records [0, 5 // 7) = none: ceil(1 / 2) = 1 padding batch.
        (7, 0, [[0, 0]], [[0, 0]]),
    ],
)
def test_evaluation_jax_batches_equal_numpy(records, ranks, rank, labels, weights):
    numpy_batches, jax_batches = both(
        records, "validation", training=False, num_shards=ranks, shard_index=rank
    )
    assert_equal_batches(numpy_batches, jax_batches)
    assert [np.asarray(y).tolist() for _, y, _ in jax_batches] == labels
    assert [np.asarray(w).tolist() for _, _, w in jax_batches] == weights
    for x, _, w in jax_batches:
        x, w = np.asarray(x), np.asarray(w)
        assert not x[w == 0].any()  # padding rows: zero images
        assert all(x[i].any() for i in np.flatnonzero(w))  # real rows: images


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_jax_dtypes_equal_numpy(records, dtype):
    numpy_batches, jax_batches = both(records, "validation", 1, training=False, dtype=dtype)
    assert str(jax_batches[0][0].dtype) == dtype
    assert_equal_batches(numpy_batches, jax_batches)


def test_jax_label_outside_num_classes_is_named(records):
    # Validation labels are 0-based 6..10: with 8 classes label 8 (stored 9) is the first bad.
    ds = imagenet_dali_dataset(
        records,
        "validation",
        batch_size=4,
        image_size=SIZE,
        training=False,
        num_classes=8,
        num_threads=1,
        arrays="jax",
    )
    with pytest.raises(ValueError, match=r"label 8 of a record of .* outside \[0, 8\)"):
        list(ds)


def test_bad_arrays_and_missing_jax(monkeypatch, records):
    kw = dict(batch_size=2, training=False, num_threads=1)
    with pytest.raises(ValueError, match="arrays must be one of .*got 'torch'"):
        imagenet_dali_dataset(records, "validation", arrays="torch", **kw)
    monkeypatch.setitem(sys.modules, "jax", None)  # import jax now fails
    with pytest.raises(ImportError, match='arrays="jax" needs JAX'):
        import_dali_jax()
    with pytest.raises(ImportError, match='arrays="jax" needs JAX'):
        imagenet_dali_dataset(records, "validation", arrays="jax", **kw)
