"""A dataset built before the `Trainer` under horovodrun is this rank's share (#39 item 3).

The walkthrough builds its datasets first and the `Trainer` (which initialises Horovod)
after; `num_shards`/`shard_index` defaulted to Horovod's size and rank only once Horovod was
initialised, so every rank read every record (`horovodrun -np 2` trained as one process,
with no warning). They now default to the launcher's rank and size before that
(`cvbench.data._distributed.rank_and_size`).

Records: 6 classes x 4 training images (24 records in 2 files), 1 validation image each.
Run as a script, this file is the horovodrun worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cvbench.data._distributed import rank_and_size, resolve_shards

HERE = Path(__file__)
ROOT = HERE.parent.parent.parent
HOROVODRUN = Path(sys.executable).with_name("horovodrun")
TRAIN, VALIDATION = 24, 6


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("shapes_records")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=4, val_per_class=1, seed=0
    )
    out = root / "records"
    build_imagenet(raw.path, out, train_shards=2, val_shards=1, num_workers=1, progress=False)
    return out


def read_share(records: Path) -> dict:
    """What this process reads of the records, with the default shards: the training pass
    (one pass, batches of 1: one row per record) and the validation rows of weight 1."""
    import tensorflow as tf

    from cvbench.data import imagenet_dataset

    def decode(image_bytes, boxes, seed):  # no random augmentation: each record's own image
        image = tf.cast(tf.io.decode_jpeg(image_bytes, channels=3), tf.float32)
        return tf.ensure_shape(image, [32, 32, 3])

    train = imagenet_dataset(
        records, "train", batch_size=1, image_size=32, training=True, repeat=False, seed=0,
        train_preprocess=decode,
    )  # fmt: skip
    sums = [int(np.sum(x)) for x, _ in train.as_numpy_iterator()]  # uint8 values: exact
    validation = imagenet_dataset(
        records, "validation", batch_size=2, image_size=32, training=False
    )
    weights = sum(float(np.sum(w)) for _, _, w in validation.as_numpy_iterator())
    return {"train": len(sums), "train_sums": sorted(sums), "validation": weights}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}, (1, 2)),  # horovodrun (Gloo)
        ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, (2, 4)),  # Open MPI
        ({"PMI_RANK": "0", "PMI_SIZE": "3"}, (0, 3)),  # MPICH / Hydra
        ({"KERAS_DISTRIBUTION_PROCESS_ID": "1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2"}, (1, 2)),
        ({"HOROVOD_RANK": "2", "HOROVOD_SIZE": "2"}, (0, 1)),  # not a rank of that size
        ({"HOROVOD_RANK": "1"}, (0, 1)),  # no size: not a launcher's
        ({}, (0, 1)),
    ],
)
def test_the_rank_before_horovod_starts_is_the_launchers(env, expected):
    assert rank_and_size(env) == expected


@pytest.mark.backend_agnostic
def test_a_dataset_built_under_a_launcher_before_horovod_starts_reads_its_half(
    records, monkeypatch
):
    whole = read_share(records)
    assert (whole["train"], whole["validation"]) == (TRAIN, VALIDATION)
    shares = []
    for rank in (0, 1):
        monkeypatch.setenv("HOROVOD_RANK", str(rank))
        monkeypatch.setenv("HOROVOD_SIZE", "2")
        assert resolve_shards(None, None) == (2, rank)
        shares.append(read_share(records))
    # 2 files, 2 ranks: rank r reads file r, 12 records each; the validation's 6 records are
    # split 3 + 3 (contiguous ranges); together every record once.
    assert [s["train"] for s in shares] == [TRAIN // 2, TRAIN // 2]
    assert [s["validation"] for s in shares] == [VALIDATION / 2, VALIDATION / 2]
    assert sorted(shares[0]["train_sums"] + shares[1]["train_sums"]) == whole["train_sums"]


@pytest.mark.slow
def test_horovodrun_two_ranks_with_datasets_built_before_the_trainer_read_half_each(
    records, tmp_path
):
    env = dict(
        os.environ,
        KERAS_BACKEND="tensorflow",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(ROOT),
    )
    command = [str(HOROVODRUN), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]
    command += [str(HERE), str(records), str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    whole = read_share(records)
    for rank, result in enumerate(ranks):
        # Counted before the Trainer started Horovod: half of each split.
        assert (result["rank"], result["size"]) == (rank, 2)
        assert (result["train"], result["validation"]) == (TRAIN // 2, VALIDATION / 2)
        # The Trainer then ran Horovod with these datasets: global batch 2 x 4, 12 records a
        # rank = 3 steps an epoch, and the validation counted every image once over ranks.
        assert result["global_batch"] == 8 and result["step"] == 3
        assert result["val_rows_over_ranks"] == VALIDATION
    assert sorted(ranks[0]["train_sums"] + ranks[1]["train_sums"]) == whole["train_sums"]


def _worker(records: Path, out: Path) -> None:
    """One horovodrun rank: the walkthrough's order (datasets, then the Trainer)."""
    import keras

    from cvbench.data import imagenet_dataset
    from cvbench.training import TrainConfig, Trainer

    share = read_share(records)
    rank, size = rank_and_size()
    train = imagenet_dataset(records, "train", batch_size=4, image_size=32, training=True, seed=0)
    validation = imagenet_dataset(
        records, "validation", batch_size=2, image_size=32, training=False
    )

    def build():
        inputs = keras.Input((32, 32, 3))
        x = keras.layers.GlobalAveragePooling2D()(inputs)
        return keras.Model(inputs, keras.layers.Dense(6, dtype="float32")(x))

    trainer = Trainer(
        build,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        keras.optimizers.SGD(0.01),
        precision="float32",
        distribution="horovod",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    trainer.fit(train, epochs=1, steps_per_epoch=share["train"] // 4)
    rows = sum(float(np.sum(w)) for _, _, w in validation.as_numpy_iterator())
    over_ranks = float(trainer.distribution.allreduce_sum(np.array([rows]))[0])
    result = {
        **share,
        "rank": rank,
        "size": size,
        "global_batch": trainer.global_batch,
        "step": trainer.state["step"],
        "val_rows_over_ranks": over_ranks,
    }
    (out / f"rank{trainer.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), Path(sys.argv[2]))
