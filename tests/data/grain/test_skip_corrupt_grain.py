"""`skip_corrupt=True` on the grain path (#40 item 4): a damaged record and an undecodable
JPEG are named without it, and with it are printed and counted once each (across worker
processes too); evaluation pads them with weight 0 (every good record weighed exactly once,
the steps unchanged on every rank); training replaces them by records drawn with their own
generator, so batches stay full and a resumed iterator continues bit-identically; the task
reports the count; all of it with TensorFlow blocked."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from grain_records import photo
from imagenet_testdata import encode

from cvbench.data.grain.dataset import REPLACEMENT_TRIES, count_records, imagenet_grain_dataset
from cvbench.data.grain.records import SKIPPED, SkippedRecords
from cvbench.data.tfrecord import imagenet_example
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic

ROOT = Path(__file__).resolve().parents[3]
# 10 records in 2 shards of 5 (records 0-4, 5-9); record i has the 0-based label i (stored
# i + 1). Record 2 (shard 0, position 2) is no tf.train.Example (the bytes 07 07 07: field 0
# with protobuf wire type 7); record 6 (shard 1, position 1) is an Example whose image is not
# a JPEG.
NUM_RECORDS, NUM_CLASSES = 10, 10
GARBAGE, UNDECODABLE = 2, 6
GOOD = [i for i in range(NUM_RECORDS) if i not in (GARBAGE, UNDECODABLE)]  # 8 records
GARBAGE_WHERE = "train-00000-of-00002 record 2: not an ImageNet tf.train.Example"
UNDECODABLE_WHERE = "train-00001-of-00002 record 1 (img_6.JPEG): undecodable image"


def _record(i: int, *, damaged: bool) -> bytes:
    if damaged and i == GARBAGE:
        return b"\x07\x07\x07"
    encoded = b"no image here" if damaged and i == UNDECODABLE else encode(photo(i, 20, 24))
    return imagenet_example(
        encoded=encoded, height=20, width=24, label=i + 1, synset=f"n{i:08d}", text="t",
        filename=f"img_{i}.JPEG",
    )  # fmt: skip


def _write(root: Path, *, damaged: bool) -> Path:
    import tensorflow as tf

    for split in ("train", "validation"):
        for k in range(2):
            path = root / f"{split}-{k:05d}-of-00002"
            with tf.io.TFRecordWriter(str(path)) as writer:
                for i in range(5 * k, 5 * k + 5):
                    writer.write(_record(i, damaged=damaged))
    return root


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("grain_damaged"), damaged=True)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """The same records with records 2 and 6 good: what the good records read as."""
    return _write(tmp_path_factory.mktemp("grain_clean"), damaged=False)


def _eval(data_dir, split="train", **kwargs):
    read = {"batch_size": 4, "training": False, "image_size": 16, "num_classes": NUM_CLASSES}
    return imagenet_grain_dataset(data_dir, split, **{**read, **kwargs})


def _train(data_dir, **kwargs):
    read = {"batch_size": 4, "training": True, "image_size": 16, "seed": 3, "repeat": True}
    return imagenet_grain_dataset(data_dir, "train", **{**read, **kwargs})


def _skipped_lines(err: str) -> list[str]:
    return sorted(line for line in err.splitlines() if line.startswith(SKIPPED))


@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
def test_without_the_flag_a_damaged_record_is_an_error_naming_file_and_record(damaged, training):
    data = _train(damaged) if training else _eval(damaged)
    # training meets whichever comes first in its shuffled order
    where = f"({re.escape(GARBAGE_WHERE)}|{re.escape(UNDECODABLE_WHERE)})"
    with pytest.raises(BadFileError, match=f"{where}.*; pass skip_corrupt=True"):
        list(itertools.islice(iter(data), 10))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("num_ranks", [1, 2])
def test_evaluation_weighs_every_good_record_once_and_pads_the_damaged_ones(
    damaged, clean, capfd, workers, num_ranks
):
    counter = SkippedRecords()
    weighed = []
    for rank in range(num_ranks):
        common = {"num_shards": num_ranks, "shard_index": rank}
        data = _eval(
            damaged, skip_corrupt=True, corrupt_counter=counter, num_workers=workers, **common
        )
        batches = list(data)
        reference = list(_eval(clean, **common))
        # steps = ceil(ceil(10 / R) / 4): 1 rank 3, 2 ranks ceil(5 / 4) = 2, on every rank
        assert len(batches) == len(data) == {1: 3, 2: 2}[num_ranks]
        images, labels, weights = (np.concatenate(part) for part in zip(*batches, strict=True))
        ref_images, ref_labels, _ = (np.concatenate(p) for p in zip(*reference, strict=True))
        ok = weights == 1.0
        weighed += labels[ok].tolist()
        # a good record's row is the clean read's, bit for bit; a damaged one's is padding
        np.testing.assert_array_equal(images[ok], ref_images[ok])
        np.testing.assert_array_equal(labels[ok], ref_labels[ok])
        assert not images[~ok].any() and not labels[~ok].any()
    assert sorted(weighed) == GOOD  # every good record once over the ranks
    assert counter.count == 2
    lines = _skipped_lines(capfd.readouterr().err)
    assert len(lines) == 2
    assert GARBAGE_WHERE in lines[0] and UNDECODABLE_WHERE in lines[1]


def _first_batches(data, n=8):
    return [tuple(np.copy(a) for a in b) for b in itertools.islice(iter(data), n)]


@pytest.mark.parametrize("workers", [0, 2])
def test_training_replaces_damaged_records_keeping_full_batches_and_the_order(
    damaged, capfd, workers
):
    counter = SkippedRecords()
    data = _train(damaged, skip_corrupt=True, corrupt_counter=counter, num_workers=workers)
    batches = _first_batches(data)  # 32 draws: the 10 records' first 3 epochs and more
    assert all(x.shape == (4, 16, 16, 3) and y.shape == (4,) for x, y in batches)
    labels = [int(v) for _, y in batches for v in y]
    assert set(labels) <= set(GOOD)  # a damaged record never reaches a batch
    assert counter.count == 2  # each met once per epoch, 3+ times: counted once
    assert len(_skipped_lines(capfd.readouterr().err)) == 2
    # the replacements depend on the sampler position and the data, not on which process
    # met the record first: a second run makes the same batches
    again = _first_batches(_train(damaged, skip_corrupt=True, num_workers=workers))
    for got, want in zip(batches, again, strict=True):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_replacement_is_a_good_record_drawn_from_the_damaged_records_generator(damaged):
    from cvbench.data.grain.dataset import TrainMap, _Transform
    from cvbench.data.grain.records import CorruptPolicy, TFRecordSource
    from cvbench.data.read.image_preprocessing import ImagePreprocessing
    from cvbench.data.read.splits import list_split_files

    source = TFRecordSource(list_split_files(damaged, "train"))
    transform = _Transform(
        source, 8, ImagePreprocessing(), "float32", None, True,
        policy=CorruptPolicy(skip=True), records=(0, NUM_RECORDS),
    )  # fmt: skip
    train = TrainMap(transform)
    for seed in range(20):
        image, label = train.random_map((GARBAGE, source[GARBAGE]), np.random.default_rng(seed))
        again, same = train.random_map((GARBAGE, source[GARBAGE]), np.random.default_rng(seed))
        assert int(label) in GOOD and int(same) == int(label)
        np.testing.assert_array_equal(image, again)  # the same generator, the same stand-in


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resumed_iterator_continues_bit_identically_past_replaced_records(damaged, workers):
    counter = SkippedRecords()
    data = _train(damaged, skip_corrupt=True, corrupt_counter=counter, num_workers=workers)
    batches = _first_batches(data, 6)
    for start in (1, 3, 5):  # damaged records are replaced before and after each position
        resumed = list(itertools.islice(data.iterate_from(start), 6 - start))
        for got, want in zip(resumed, batches[start:], strict=True):
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)


def test_a_rank_of_damaged_records_is_an_error_not_an_endless_search(tmp_path, capfd):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(tmp_path / "train-00000-of-00001")) as writer:
        for _ in range(4):
            writer.write(b"\x07\x07\x07")
    data = _train(tmp_path, skip_corrupt=True)
    with pytest.raises(BadFileError, match=f"{REPLACEMENT_TRIES} damaged records in a row"):
        next(iter(data))
    assert len(_skipped_lines(capfd.readouterr().err)) == 4  # each of the 4 once


def test_a_truncated_files_tail_is_skipped_counted_once_and_its_records_read(
    damaged, tmp_path, capfd
):
    import shutil

    for name in ("train-00000-of-00002", "train-00001-of-00002"):
        shutil.copy(damaged / name, tmp_path / name)
    shard = tmp_path / "train-00001-of-00002"
    shard.write_bytes(shard.read_bytes()[:-5])  # record 9 (position 4) cut off
    with pytest.raises(BadFileError, match="is truncated"):
        count_records(tmp_path, "train")
    assert count_records(tmp_path, "train", skip_corrupt=True) == 9  # nothing printed
    assert capfd.readouterr().err == ""
    counter = SkippedRecords()
    data = _eval(tmp_path, skip_corrupt=True, corrupt_counter=counter)
    weights = [b[2] for b in data]
    # 9 complete records, ceil(9 / 4) = 3 steps; records 2 and 6 weigh 0: 7 weighed
    assert len(weights) == 3 and float(np.concatenate(weights).sum()) == 7.0
    assert counter.count == 3  # the two damaged records and the cut-off tail


def test_the_task_counts_what_grain_skipped(damaged):
    from cvbench.tasks import ClassificationTask, TaskOptions

    options = TaskOptions(
        model="resnet18", data_dir=str(damaged), image_size=16, num_classes=NUM_CLASSES,
        reader="grain", skip_corrupt=True,
    )  # fmt: skip
    task = ClassificationTask(options)
    one = SimpleNamespace(rank=0, size=1)
    data = task.read("train", batch_size=4, distribution=one, training=False)
    assert sum(float(b[2].sum()) for b in data) == len(GOOD)
    assert task.corrupt_records() == 2
    assert isinstance(task._corrupt_counter, SkippedRecords)


def test_skipping_on_grain_runs_where_tensorflow_cannot_be_imported(damaged, tmp_path):
    blocker = tmp_path / "no_tf" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no TensorFlow here')\n")
    code = textwrap.dedent(
        f"""
        import itertools, sys
        from cvbench.data.grain.dataset import imagenet_grain_dataset
        from cvbench.data.grain.records import SkippedRecords
        counter = SkippedRecords()
        train = imagenet_grain_dataset({str(damaged)!r}, "train", batch_size=4,
            training=True, image_size=16, seed=0, num_workers=2, skip_corrupt=True,
            corrupt_counter=counter)
        labels = {{int(v) for _, y in itertools.islice(iter(train), 8) for v in y}}
        evaluation = imagenet_grain_dataset({str(damaged)!r}, "validation", batch_size=4,
            training=False, image_size=16, skip_corrupt=True, corrupt_counter=counter)
        weights = sum(float(b[2].sum()) for b in evaluation)
        assert "tensorflow" not in sys.modules
        print(sorted(labels), weights, counter.count)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(blocker.parent))
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    # training: the 8 good labels; validation: 8 weighed; 4 damaged records (2 per split)
    assert run.stdout.splitlines()[-1] == f"{GOOD} 8.0 4"
    assert len(_skipped_lines(run.stderr)) == 4


def test_evaluation_read_ahead_by_threads_gives_the_same_batches(damaged):
    # read threads prefetch evaluation's items, which are whole batches: same rows, same steps
    plain = list(_eval(damaged, skip_corrupt=True))
    ahead = list(_eval(damaged, skip_corrupt=True, read_threads=2))
    assert len(plain) == len(ahead) == 3
    for got, want in zip(ahead, plain, strict=True):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
