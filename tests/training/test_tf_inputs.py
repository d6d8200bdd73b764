"""tf.data specifics of the batch sources (TensorFlow backend)."""

import numpy as np
import tensorflow as tf

from cvbench.training.inputs import FactorySource, IterableSource


def test_tf_dataset_resume_uses_skip_and_reads_the_batch_size():
    ds = tf.data.Dataset.range(100).map(lambda i: (tf.fill([4, 2], i), tf.fill([4], i)))
    ds = ds.batch(1, drop_remainder=True).unbatch()  # a static batch dimension of 4
    source = IterableSource(ds, steps_per_epoch=10)
    assert source.batch_size == 4
    assert source.steps_per_epoch == 10
    batch = next(source.epoch(3, 2, 32))
    assert int(batch[1][0]) == 32  # 32 batches consumed before this point


def test_finite_tf_dataset_length_is_its_cardinality():
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((10, 1)), np.arange(10))).batch(3)
    assert IterableSource(ds).steps_per_epoch == 4


def test_epoch_function_returning_tf_datasets():
    source = FactorySource(
        lambda e: tf.data.Dataset.range(5).map(lambda i: (tf.reshape(i + 10 * e, [1]), i)),
        steps_per_epoch=5,
    )
    assert [int(x[0]) for x, _, _ in source.epoch(1, 3, 0)] == [13, 14]
