"""Tests for the COCO TFRecord reader: label map, box transforms, train and eval streams."""

from __future__ import annotations

import doctest
import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cvbench.data.coco_schema import CLASS_LABEL, CocoImage, CocoObject, coco_example
from cvbench.data.read import coco

# ---------------------------------------------------------------- tiny records written here

H, W = 48, 64  # every test image is 48 high, 64 wide


def _jpeg(value: int, height: int = H, width: int = W) -> bytes:
    """A flat grey JPEG: decodes to (nearly) `value` everywhere."""
    buf = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), value, np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def _obj(cat: int, box, crowd: bool = False) -> CocoObject:
    return CocoObject(cat, f"name{cat}", tuple(box), crowd, 1.0)


def _write_records(path, images, *, drop_label: bool = False) -> None:
    with tf.io.TFRecordWriter(str(path)) as w:
        for image in images:
            record = coco_example(image, _jpeg(10 * (image.image_id % 20)))
            if drop_label:  # what NVIDIA's records look like: names only
                ex = tf.train.Example.FromString(record)
                del ex.features.feature[CLASS_LABEL]
                record = ex.SerializeToString()
            w.write(record)


def _images(first_id: int, count: int) -> list[CocoImage]:
    out = []
    for k in range(count):
        image_id = first_id + k
        objs = (_obj(1, (0.1, 0.1, 0.6, 0.5)), _obj(90, (0.5, 0.5, 0.9, 0.9)))
        out.append(CocoImage(image_id, f"{image_id}.jpg", H, W, objs[: k % 3]))
    return out


@pytest.fixture(scope="module")
def val_dir(tmp_path_factory):
    """Two val shards: 5 and 4 images, ids 1..9."""
    d = tmp_path_factory.mktemp("coco_val")
    _write_records(d / "coco_val.record-00000-of-00002", _images(1, 5))
    _write_records(d / "coco_val.record-00001-of-00002", _images(6, 4))
    return d


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory):
    """One train shard of 4 images with boxes of known classes (COCO ids 1, 90, 12, 5)."""
    d = tmp_path_factory.mktemp("coco_train")
    objs = (
        _obj(1, (0.0, 0.0, 1.0, 1.0)),  # covers the image: survives any crop
        _obj(90, (0.0, 0.0, 1.0, 1.0)),
        _obj(12, (0.0, 0.0, 1.0, 1.0)),  # COCO id 12 is unused: not in the coco80 map
        _obj(5, (0.0, 0.0, 1.0, 1.0), crowd=True),
    )
    _write_records(
        d / "coco_train.record-00000-of-00001",
        [CocoImage(i, f"{i}.jpg", H, W, objs) for i in range(1, 5)],
    )
    return d


# ---------------------------------------------------------------- label map


def test_label_maps():
    ssd = coco.CocoLabelMap.ssd320()
    assert ssd.num_classes == 90
    # SSD320: index = COCO id - 1, for every id 1..90 (used or not).
    np.testing.assert_array_equal(ssd.to_indices([1, 12, 90, 91, 0]), [0, 11, 89, -1, -1])
    np.testing.assert_array_equal(ssd.to_coco_ids([0, 89]), [1, 90])
    c80 = coco.CocoLabelMap.coco80()
    assert c80.num_classes == 80 and len(coco.COCO_2017_CATEGORIES) == 80
    # ids 12, 26, 29, 30, 45, 66, 68, 69, 71, 83 are the ten unused ones.
    assert set(range(1, 91)) - set(c80.category_ids) == {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}
    # id 13 (stop sign) is the 12th used id -> index 11.
    np.testing.assert_array_equal(c80.to_indices([13, 12]), [11, -1])
    cats = [{"id": 7, "name": "b"}, {"id": 3, "name": "a"}]
    assert coco.CocoLabelMap.from_categories(cats).category_ids == (3, 7)
    with pytest.raises(ValueError, match=r"unique integers in 1..10000 \(MAX_CATEGORY_ID\)"):
        coco.CocoLabelMap((1, 1))
    with pytest.raises(ValueError, match=r"in 1..10000 \(MAX_CATEGORY_ID\), got \(1, 10001\)"):
        coco.CocoLabelMap((1, 10001))  # index_table would be as long as the largest id
    with pytest.raises(ValueError, match=r"\[0, 80\)"):
        c80.to_coco_ids([80])


# ---------------------------------------------------------------- box transforms


def test_crop_boxes_follows_random_crop_image():
    window = tf.constant([0.2, 0.1, 0.8, 0.6])  # 0.6 high, 0.5 wide
    boxes = tf.constant(
        [
            [0.2, 0.1, 0.5, 0.35],  # inside: -> [0, 0, 0.5, 0.5]
            [0.0, 0.0, 0.5, 0.35],  # partly above/left: clipped -> [0, 0, 0.5, 0.5]
            [0.8, 0.1, 0.9, 0.6],  # starts on the bottom edge: completely outside
            [0.3, 0.6, 0.4, 0.9],  # starts on the right edge: completely outside
            [0.5, 0.35, 1.0, 1.0],  # overlaps bottom-right -> [0.5, 0.5, 1, 1]
        ]
    )
    new, keep = coco.crop_boxes(boxes, window)
    np.testing.assert_array_equal(keep.numpy(), [True, True, False, False, True])
    expected = [[0, 0, 0.5, 0.5], [0, 0, 0.5, 0.5], [0.5, 0.5, 1, 1]]
    np.testing.assert_allclose(new.numpy(), expected, atol=1e-6)


def test_flip_and_pad():
    # x -> 1 - x swaps xmin and xmax: [0.1, 0.2, 0.3, 0.7] -> [0.1, 0.3, 0.3, 0.8].
    flipped = coco.flip_boxes_left_right(tf.constant([[0.1, 0.2, 0.3, 0.7]]))
    np.testing.assert_allclose(flipped.numpy(), [[0.1, 0.3, 0.3, 0.8]], atol=1e-7)
    boxes, classes, n = coco.pad_boxes(tf.ones([120, 4]), tf.range(120), max_boxes=100)
    assert boxes.shape == (100, 4) and int(n) == 100 and classes.numpy()[-1] == 99
    boxes, classes, n = coco.pad_boxes(tf.ones([2, 4]), tf.constant([3, 4]))
    assert int(n) == 2 and classes.numpy()[:3].tolist() == [3, 4, -1]
    assert boxes.numpy()[2:].sum() == 0.0


def test_sample_crop_window_respects_ranges():
    shape = tf.constant([480, 640, 3])
    for boxes in (tf.zeros([0, 4]), tf.constant([[0.1, 0.1, 0.2, 0.2]])):
        for i in range(20):
            crop, window = coco.sample_crop_window(shape, boxes, tf.constant([i, 7]))
            y, x, h, w = crop.numpy().tolist()
            assert min(x, y) >= 0 and y + h <= 480 and x + w <= 640
            # Area fraction in [0.75, 1]; aspect w/h in [0.75, 3]: the whole image (4:3)
            # qualifies, so no fallback is ever needed. One pixel of rounding slack.
            assert 0.75 * 480 * 640 - (h + w) <= h * w <= 480 * 640
            assert 0.75 - 1 / h <= w / h <= 3.0 + 1 / h
            np.testing.assert_allclose(
                window.numpy(), [y / 480, x / 640, (y + h) / 480, (x + w) / 640], rtol=1e-6
            )
    # Stateless: the same seed gives the same window.
    a, _ = coco.sample_crop_window(shape, tf.zeros([0, 4]), tf.constant([3, 4]))
    b, _ = coco.sample_crop_window(shape, tf.zeros([0, 4]), tf.constant([3, 4]))
    np.testing.assert_array_equal(a.numpy(), b.numpy())


# ---------------------------------------------------------------- streams


def test_train_stream_shapes_classes_and_boxes(train_dir):
    ds = coco.coco_dataset(
        train_dir, "train", batch_size=2, image_size=64, training=True,
        label_map=coco.CocoLabelMap.coco80(), shuffle_buffer=4,
    )  # fmt: skip
    images, targets = next(iter(ds))
    assert images.shape == (2, 64, 64, 3) and images.dtype == tf.float32
    assert targets["boxes"].shape == (2, 100, 4) and targets["boxes"].dtype == tf.float32
    assert targets["classes"].shape == (2, 100) and targets["classes"].dtype == tf.int32
    # COCO ids 1, 90 and 5 (crowd, kept) map to coco80 indices 0, 79, 4; id 12 is dropped.
    np.testing.assert_array_equal(targets["num_boxes"].numpy(), [3, 3])
    np.testing.assert_array_equal(targets["classes"].numpy()[:, :4], [[0, 79, 4, -1]] * 2)
    # Whole-image boxes stay whole-image boxes after any crop or flip.
    np.testing.assert_allclose(targets["boxes"].numpy()[:, :3], np.tile([0, 0, 1, 1], (2, 3, 1)))
    # Image value 10 * id (grey, in [0, 255]): a flat image stays flat through crop and resize.
    img = images.numpy()[0]
    assert np.ptp(img[..., 0]) < 4.0 and 5.0 < img.mean() < 45.0
    ds = coco.coco_dataset(
        train_dir, "train", batch_size=2, image_size=64, training=True, drop_crowd=True,
        label_map=coco.CocoLabelMap.coco80(), shuffle_buffer=4,
    )  # fmt: skip
    np.testing.assert_array_equal(next(iter(ds))[1]["num_boxes"].numpy(), [2, 2])


def test_train_stream_with_the_ssd_target_encoder(train_dir):
    from cvbench.detection.anchors import multiscale_anchors
    from cvbench.detection.targets import TargetEncoder

    anchors = multiscale_anchors(128)
    # Levels 3-7 at 128: 16^2 + 8^2 + 4^2 + 2^2 + 1^2 = 341 locations x 6 anchors = 2046.
    assert anchors.shape == (2046, 4)
    ds = coco.coco_dataset(
        train_dir, "train", batch_size=2, image_size=128, training=True,
        target_encoder=TargetEncoder(anchors, num_classes=90), shuffle_buffer=4,
    )  # fmt: skip
    images, y = next(iter(ds))
    assert images.shape == (2, 128, 128, 3)
    assert y["boxes"].shape == (2, 2046, 5) and y["boxes"].dtype == tf.float32
    assert y["classes"].shape == (2, 2046, 91) and y["classes"].dtype == tf.float32
    # Four whole-image boxes (ids 1, 90, 12, 5: SSD320 indices 0, 89, 11, 4) are all forced to
    # match some anchor: each image has matched anchors whose one-hot classes are among them.
    positive = y["boxes"].numpy()[..., 4] > 0
    assert positive.sum(axis=1).min() >= 1
    matched_classes = set(np.argmax(y["classes"].numpy()[..., :90][positive], -1).tolist())
    assert matched_classes <= {0, 89, 11, 4} and matched_classes


def test_eval_covers_every_image_once_across_two_shards(val_dir):
    assert coco.num_examples(val_dir, "val") == 9
    seen = []
    for rank in (0, 1):
        ds = coco.coco_dataset(
            val_dir, "val", batch_size=4, image_size=64, training=False, num_shards=2,
            shard_index=rank,
        )  # fmt: skip
        batches = list(ds)
        # 9 records in contiguous ranges: rank 0 reads 4 (ids 1-4), rank 1 reads 5 (ids 5-9).
        # Both run ceil(ceil(9 / 2) / 4) = 2 steps; rank 0's second batch is all padding.
        assert len(batches) == 2 == ds.cardinality().numpy()
        assert batches[1][1]["valid"].numpy().sum() == (0 if rank == 0 else 1)
        for images, meta in batches:
            assert images.shape == (4, 64, 64, 3) and images.dtype == tf.float32
            assert meta["image_id"].dtype == tf.int64 and meta["image_size"].dtype == tf.int32
            valid = meta["valid"].numpy()
            assert (meta["image_id"].numpy()[~valid] == -1).all()
            seen += meta["image_id"].numpy()[valid].tolist()
            sizes = meta["image_size"].numpy()
            assert (sizes[valid] == [H, W]).all() and (sizes[~valid] == 0).all()
    assert sorted(seen) == list(range(1, 10))


def test_eval_images_are_resized_and_optionally_mean_subtracted(val_dir):
    images, meta = next(iter(coco.coco_dataset(val_dir, "val", batch_size=2, training=False)))
    assert images.shape == (2, 320, 320, 3)
    # Image 1 is grey 10 (the ssd320 model subtracts the means itself), up to JPEG error.
    assert meta["image_id"].numpy()[0] == 1
    np.testing.assert_allclose(images.numpy()[0].mean(axis=(0, 1)), [10, 10, 10], atol=1.5)
    ds = coco.coco_dataset(
        val_dir, "val", batch_size=2, training=False, subtract_mean=True, dtype="bfloat16"
    )
    images, _ = next(iter(ds))
    assert images.dtype == tf.bfloat16
    # 10 - (123.68, 116.779, 103.939); bfloat16 keeps 8 bits: within 1 of it.
    np.testing.assert_allclose(
        tf.cast(images[0], tf.float32).numpy().mean(axis=(0, 1)),
        np.subtract(10, coco.MEAN_RGB),
        atol=2.0,
    )


def test_records_without_class_label_use_the_names(tmp_path):
    objs = (CocoObject(3, "car", (0.0, 0.0, 1.0, 1.0), False, 1.0),)
    _write_records(
        tmp_path / "coco_train.record-00000-of-00001",
        [CocoImage(1, "1.jpg", H, W, objs)],
        drop_label=True,
    )
    ds = coco.coco_dataset(
        tmp_path, "train", batch_size=1, image_size=64, training=True, shuffle_buffer=1
    )
    _, t = next(iter(ds))
    assert t["classes"].numpy()[0, 0] == 2  # "car" -> COCO id 3 -> SSD320 index 2


def test_bad_arguments(tmp_path, val_dir):
    with pytest.raises(FileNotFoundError, match="build-coco"):
        coco.coco_dataset(tmp_path, "val", batch_size=1, training=False)
    with pytest.raises(FileNotFoundError, match="coco_test.record"):
        coco.coco_dataset(val_dir, "test", batch_size=1, training=False)
    with pytest.raises(ValueError, match="split"):
        coco.coco_dataset(val_dir, "../val", batch_size=1, training=False)
    with pytest.raises(ValueError, match="batch_size"):
        coco.coco_dataset(val_dir, "val", batch_size=0, training=False)
    with pytest.raises(ValueError, match="shard_index"):
        coco.coco_dataset(val_dir, "val", batch_size=1, training=False, num_shards=2, shard_index=2)


def test_docstring_examples():
    from cvbench.data import coco_labels as labels

    # The label map (and its examples) lives in the TensorFlow-free cvbench.data.coco_labels;
    # cvbench.data.read.coco re-exports it.
    assert coco.CocoLabelMap is labels.CocoLabelMap
    for module in (coco, labels):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__
    assert doctest.testmod(labels).attempted > 0
