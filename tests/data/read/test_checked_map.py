"""`corrupt.checked_map`, the decode guard's fast path: `fn` over every element in order, and
a failing call raises naming the first failing element (wherever it falls in a chunk), while
errors of the input pass through unchanged."""

from __future__ import annotations

import pytest
import tensorflow as tf

from cvbench.data.read.corrupt import SKIP_HINT, checked_map


def _elements(n: int) -> tf.data.Dataset:
    # Dicts with a variable-length part, as examples have (boxes): element i has i % 3 rows.
    def element(i: tf.Tensor) -> dict:
        return {"x": tf.cast(i, tf.float32), "rows": tf.zeros([i % 3, 4]), "index": i}

    return tf.data.Dataset.range(n).map(element)


def _doubled(e: dict) -> tf.Tensor:
    # Fails (as an undecodable image would) on a negative value.
    with tf.control_dependencies([tf.debugging.assert_non_negative(e["x"])]):
        return 2.0 * e["x"]


def _negate(positions: list[int]):
    def fn(e: dict) -> dict:
        bad = tf.reduce_any(tf.equal(e["index"], tf.constant(positions, tf.int64)))
        return {**e, "x": tf.where(bad, -e["x"] - 1.0, e["x"])}

    return fn


def _message(e: dict) -> tf.Tensor:
    return tf.strings.join(["bad ", tf.strings.as_string(e["index"])])


def _checked(ds: tf.data.Dataset, chunk_size: int = 4) -> tf.data.Dataset:
    return checked_map(
        ds,
        _doubled,
        message_fn=_message,
        output_spec=tf.TensorSpec([], tf.float32),
        chunk_size=chunk_size,
        deterministic=True,
    )


def test_every_element_in_order_with_its_input():
    # 10 elements in chunks of 4, 4 and 2: out = 2x, and the input element comes with it.
    pairs = list(_checked(_elements(10)).as_numpy_iterator())
    assert [float(out) for out, _ in pairs] == [2.0 * i for i in range(10)]
    assert [int(e["index"]) for _, e in pairs] == list(range(10))
    assert [e["rows"].shape for _, e in pairs] == [(i % 3, 4) for i in range(10)]


@pytest.mark.parametrize(
    "bad, named",
    [
        ([0], 0),  # the first element of the first chunk
        ([3], 3),  # the last of a full chunk (chunks [0, 4), [4, 8), [8, 10))
        ([9], 9),  # the last element of all, in the short last chunk
        ([5, 6], 5),  # two in a row: the first is named
        ([6, 2], 2),  # two in different chunks: the earlier one
    ],
)
def test_a_failure_names_the_first_failing_element(bad, named):
    ds = _checked(_elements(10).map(_negate(bad)))
    seen = []
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        for out, _ in ds.as_numpy_iterator():
            seen.append(float(out))
    assert f"bad {named}{SKIP_HINT}" in info.value.message
    # Every element before the failing one was delivered first, in order.
    assert seen == [2.0 * i for i in range(named)]


def test_an_error_of_the_input_is_raised_as_it_is():
    def label_check(e: dict) -> dict:
        ok = tf.debugging.Assert(tf.not_equal(e["index"], 5), ["label check at 5"])
        with tf.control_dependencies([ok]):
            return tf.nest.map_structure(tf.identity, e)

    with pytest.raises(tf.errors.InvalidArgumentError, match="label check at 5") as info:
        list(_checked(_elements(10).map(label_check)))
    assert "bad " not in info.value.message


@pytest.mark.parametrize("chunk_size", [0, -1, True, 2.0])
def test_chunk_size_must_be_a_positive_int(chunk_size):
    with pytest.raises(ValueError, match=f"chunk_size must be a positive int, got {chunk_size}"):
        _checked(_elements(3), chunk_size=chunk_size)
