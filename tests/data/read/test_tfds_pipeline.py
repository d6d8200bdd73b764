"""tfds_dataset on `tfds.testing.mock_data` (offline): same element structure and
preprocessing as the TFRecord pipeline."""

from __future__ import annotations

import numpy as np
import pytest

NUM_EXAMPLES = 6  # mock examples per split


@pytest.fixture
def mocked():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=NUM_EXAMPLES):
        yield


def test_training_batches_from_tfds(mocked):
    import tensorflow as tf

    from cvbench.data import tfds_dataset

    ds = tfds_dataset(
        "imagenet2012",
        "train",
        batch_size=4,
        image_size=32,
        training=True,
        num_shards=1,
        shard_index=0,
        seed=0,
        shuffle_buffer=8,
    )
    assert ds.element_spec[0].shape.as_list() == [4, 32, 32, 3]
    for images, labels in ds.take(3):  # 6 examples repeat: 3 batches need a second epoch
        assert images.dtype == tf.float32 and labels.dtype == tf.int32
        assert float(tf.reduce_min(images)) >= (0 - 123.68) / 58.395 - 1e-5
        assert float(tf.reduce_max(images)) <= (255 - 103.53) / 57.385 + 1e-5
        assert all(0 <= v < 1000 for v in labels.numpy())  # TFDS labels are already 0-based


def test_evaluation_from_tfds_pads_with_zero_weights(mocked):
    from cvbench.data import tfds_dataset

    ds = tfds_dataset(
        "imagenet2012",
        "validation",
        batch_size=4,
        image_size=32,
        training=False,
        num_shards=1,
        shard_index=0,
    )
    # 6 examples in batches of 4: 2 steps, weights 4 + 2.
    assert int(ds.cardinality()) == 2
    weights = np.concatenate([w for _, _, w in ds.as_numpy_iterator()])
    assert weights.tolist() == [1.0] * 6 + [0.0] * 2


def test_unprepared_tfds_data_is_a_clear_error(tmp_path):
    from cvbench.data import tfds_dataset

    with pytest.raises(FileNotFoundError, match="imagenet2012"):
        tfds_dataset(
            "imagenet2012",
            "validation",
            batch_size=2,
            training=False,
            data_dir=tmp_path,
            num_shards=1,
            shard_index=0,
        )


def test_a_tfds_dataset_carries_its_inputs_and_class_names(mocked):
    # as imagenet_dataset: what a Trainer fitted on it writes into its model files; the
    # names are the builder's `label` ClassLabel names (imagenet2012: 1000 WordNet ids)
    from cvbench.data import ImagePreprocessing, tfds_dataset
    from cvbench.data.read.model_inputs import ATTRIBUTE

    p = ImagePreprocessing(eval_crop="crop_then_resize", resize_method="bilinear_tf1")
    ds = tfds_dataset("imagenet2012", "validation", batch_size=4, image_size=32,
                      training=False, preprocessing=p)  # fmt: skip
    inputs = getattr(ds, ATTRIBUTE)
    assert (inputs.image_size, inputs.preprocessing) == (32, p)
    assert len(inputs.class_names) == 1000 and inputs.class_names[0] == "n01440764"
    info = inputs.model_info(1000)
    assert (info.resize, info.interpolation) == ("crop_then_resize", "bilinear_tf1")

    def stretch(image_bytes):
        import tensorflow as tf

        return tf.image.resize(
            tf.io.decode_image(image_bytes, 3, expand_animations=False), [32, 32]
        )

    own = tfds_dataset("imagenet2012", "validation", batch_size=4, image_size=32,
                       training=False, eval_preprocess=stretch)  # fmt: skip
    assert getattr(own, ATTRIBUTE, None) is None  # the caller's preprocessing: not stated
