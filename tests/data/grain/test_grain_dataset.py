"""`imagenet_grain_dataset`: the grain pipeline against tf.data's on the same records, its
saved iterator state, its process shards, its errors, and a run with TensorFlow blocked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from grain_records import SIZES, photo, write_split

from cvbench.data.grain.dataset import imagenet_grain_dataset
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.utils.errors import BadFileError

ROOT = Path(__file__).resolve().parents[3]
# 11 records in 3 shards (4, 4, 3): the 7 sizes of grain_records, then 4 more; record 2 a
# grayscale JPEG, record 5 a PNG (both decoded by Pillow or converted by libjpeg)
RECORDS = [*SIZES, (64, 48), (33, 90), (128, 96), (80, 80)]
KINDS = {2: "gray", 5: "png"}
NUM_CLASSES = 5  # record i has the 0-based label i % 5

# The grain path is the JAX backend's input: every test here runs under KERAS_BACKEND=jax too.
pytestmark = pytest.mark.backend_agnostic


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain_data")
    write_split(root, "validation", RECORDS, num_shards=3, kinds=KINDS)
    write_split(root, "train", RECORDS, num_shards=3, kinds=KINDS)
    return root


def _grain(data_dir, **kwargs):
    read = {"split": "validation", "batch_size": 4, "training": False, "image_size": 32}
    return imagenet_grain_dataset(data_dir, **{**read, **kwargs})


def test_evaluation_batches_equal_tf_datas_bit_for_bit(data_dir):
    # Bit for bit, not within a level: simplejpeg is libjpeg-turbo with the decoder options
    # tf.io.decode_jpeg is given (the same IDCT and chroma upsampling), Pillow decodes the PNG
    # losslessly as TensorFlow does, and the resize and scaling repeat TensorFlow's float32
    # operations in the same order (tests/data/grain/test_grain_augment.py per step).
    from cvbench.data.read.imagenet import imagenet_dataset

    for p in (ImagePreprocessing(), ImagePreprocessing.nvcnn_inception_v3()):
        for shards, index in ((1, 0), (2, 0), (2, 1)):
            read = {"num_shards": shards, "shard_index": index, "preprocessing": p}
            ours = list(_grain(data_dir, image_size=40, **read))
            theirs = imagenet_dataset(
                data_dir,
                "validation",
                batch_size=4,
                training=False,
                image_size=40,
                cycle_length=1,  # file order (tf.data interleaves files otherwise)
                **read,
            )
            theirs = [tuple(t.numpy() for t in batch) for batch in theirs]
            assert len(ours) == len(theirs) > 0
            for a, b in zip(ours, theirs, strict=True):
                for x, y in zip(a, b, strict=True):
                    assert x.dtype == y.dtype and np.array_equal(x, y)


def test_evaluation_reads_every_record_once_over_ranks_and_pads_with_weight_0(data_dir):
    # 11 records over 2 ranks: 5 and 6; steps = ceil(ceil(11 / 2) / 4) = 2 on both ranks
    labels, weights = [], []
    for index in (0, 1):
        batches = _grain(data_dir, num_shards=2, shard_index=index)
        assert len(batches) == 2
        out = list(batches)
        assert len(out) == 2 and all(b[0].shape == (4, 32, 32, 3) for b in out)
        w = np.concatenate([b[2] for b in out])
        images = np.concatenate([b[0] for b in out])
        assert not images[w == 0].any()  # padding rows: zero image
        labels += np.concatenate([b[1] for b in out])[w == 1].tolist()
        weights += w.tolist()
    assert labels == [i % NUM_CLASSES for i in range(11)] and sum(weights) == 11


def test_an_iterator_restored_mid_epoch_yields_exactly_the_remaining_batches(data_dir):
    train = {"split": "train", "training": True, "batch_size": 2, "seed": 7}
    batches = _grain(data_dir, **train)
    uninterrupted = iter(batches)
    for _ in range(3):  # into the first epoch (5 batches of 2 of 11 records per epoch)
        next(uninterrupted)
    state = uninterrupted.get_state()
    expected = [next(uninterrupted) for _ in range(6)]  # through the epoch's end and on
    # a fresh dataset, as after a restart (reading ahead or not does not change the batches)
    resumed = iter(_grain(data_dir, read_threads=2, **train))
    resumed.set_state(state)
    for want in expected:
        got = next(resumed)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_the_order_and_the_augmentation_follow_the_seed(data_dir):
    train = {"split": "train", "training": True, "batch_size": 2}
    first = [next(iter(_grain(data_dir, seed=s, **train)))[0] for s in (1, 1, 2)]
    assert np.array_equal(first[0], first[1]) and not np.array_equal(first[0], first[2])


def test_two_process_shards_read_every_record_once_per_epoch(data_dir):
    # one pass (repeat=False), batch 1: rank 0 gets records 0..4, rank 1 records 5..10
    seen = []
    for index in (0, 1):
        batches = _grain(
            data_dir,
            split="train",
            training=True,
            batch_size=1,
            repeat=False,
            seed=3,
            num_shards=2,
            shard_index=index,
        )
        assert batches.num_records == (5, 6)[index]
        seen.append(sorted(int(b[1][0]) for b in batches))
    assert seen[0] == sorted(i % NUM_CLASSES for i in range(5))
    assert seen[1] == sorted(i % NUM_CLASSES for i in range(5, 11))


def test_a_label_outside_the_models_classes_names_the_record(data_dir):
    with pytest.raises(
        BadFileError,
        match=r"validation-00000-of-00003 record 3 \(img_3.JPEG\): "
        r"label 3 \(stored 4\) is outside the model's 3 classes",
    ):
        list(_grain(data_dir, num_classes=3))


def test_an_undecodable_image_names_the_file_and_record(tmp_path):
    from cvbench.data.tfrecord import imagenet_example

    write_split(tmp_path, "validation", [(20, 20)])
    record = imagenet_example(
        encoded=b"no image", height=1, width=1, label=1, synset="n1", text="t", filename="x.JPEG"
    )
    _append_record(tmp_path / "validation-00000-of-00001", record)
    with pytest.raises(
        BadFileError,
        match=r"validation-00000-of-00001 record 1 \(x.JPEG\): "
        "undecodable image",
    ):
        list(_grain(tmp_path))


def _append_record(path: Path, record: bytes) -> None:
    import tensorflow as tf

    records = [*tf.data.TFRecordDataset(str(path)).as_numpy_iterator(), record]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for r in records:
            writer.write(r)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": "int8"}, "dtype must be one of"),
        ({"skip_corrupt": True, "corrupt_counter": object()}, "must be a .*SkippedRecords"),
        ({"num_workers": -1}, "num_workers must be an int >= 0, got -1"),
        ({"read_threads": 1.5}, "read_threads must be an int >= 0, got 1.5"),
        ({"preprocessing": ImagePreprocessing(resize_method="area")}, "bilinear or bilinear_tf1"),
    ],
)
def test_bad_arguments_are_refused(data_dir, kwargs, message):
    with pytest.raises(ValueError, match=message):
        _grain(data_dir, **kwargs)


def test_training_flips_about_half_of_2000_draws(tmp_path):
    from cvbench.data.grain.augment import resize_bilinear
    from cvbench.data.grain.dataset import TrainMap, _Transform
    from cvbench.data.grain.records import TFRecordSource

    (path,) = write_split(tmp_path, "train", [(24, 24)], kinds={0: "png"})  # lossless
    source = TFRecordSource([path])
    whole = ImagePreprocessing(area_range=(1.0, 1.0), aspect_ratio_range=(1.0, 1.0))
    transform = _Transform(source, 8, whole, "float32", None, True)
    train = TrainMap(transform)
    image = photo(0, 24, 24)  # the PNG of record 0: its pixels exactly
    plain = transform.finish(resize_bilinear(image, (8, 8)))
    mirrored = transform.finish(resize_bilinear(image[:, ::-1], (8, 8)))
    flips = 0
    for seed in range(2000):
        out, _ = train.random_map((0, source[0]), np.random.default_rng(seed))
        assert np.array_equal(out, plain) or np.array_equal(out, mirrored)
        flips += bool(np.array_equal(out, mirrored))
    assert 900 <= flips <= 1100  # p = 0.5: 1000 +- 4.5 standard deviations (22)


@pytest.mark.parametrize("training", [True, False])
def test_a_split_without_records_is_refused_naming_it(tmp_path, training):
    # A file pattern's files are the caller's (a shard listed by name is never 0 bytes).
    (tmp_path / "validation-00000-of-00001").write_bytes(b"")
    with pytest.raises(ValueError, match=f"the validation files in {tmp_path} hold no records"):
        _grain(tmp_path, training=training, file_pattern="validation-*")


def test_the_grain_path_runs_where_tensorflow_cannot_be_imported(data_dir, tmp_path):
    blocker = tmp_path / "no_tf" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no TensorFlow here')\n")
    code = textwrap.dedent(
        f"""
        import sys
        from cvbench.data.grain.dataset import imagenet_grain_dataset
        train = imagenet_grain_dataset({str(data_dir)!r}, "train", batch_size=3,
            training=True, image_size=24, seed=0, num_workers=1, dtype="bfloat16")
        images, labels = next(iter(train))
        evaluation = imagenet_grain_dataset({str(data_dir)!r}, "validation", batch_size=4,
            training=False, image_size=24)
        weights = sum(float(b[2].sum()) for b in evaluation)
        assert "tensorflow" not in sys.modules
        print(images.shape, images.dtype, labels.dtype, weights)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(blocker.parent))
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-1] == "(3, 24, 24, 3) bfloat16 int32 11.0"
