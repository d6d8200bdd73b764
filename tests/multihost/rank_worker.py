"""Run by every rank of the two-host job (`horovodrun ... python rank_worker.py DATA OUT`), and
by the tests to write the records (`write_records`); not collected.

Each rank:
1. reads one epoch of the training split and the whole validation split through
   `cvbench.data.imagenet_dataset` with its default sharding (Horovod's rank and size) and
   records the labels it got: record i of the training split has the label i (16 records in 4
   files, 0-based labels 0..15), validation record j the label j (10 records in 1 file), so
   the labels name the records;
2. trains the tiny model below (no batch norm) data-parallel on seeded arrays, batch `BATCH`
   per rank, with rank-dependent initial weights (only the broadcast from rank 0 can make the
   ranks agree);
3. evaluates the trained model on the validation split, every rank its own shard (loss and
   top-1 summed over ranks).

Writes OUT/rank<r>.json (rank, size, host, local rank, the labels read, the evaluation) and
OUT/rank<r>.npz (the weights). `rank_worker.py reference DATA OUT 4`, one process without
Horovod, trains the reference at 4 x `BATCH` (OUT/reference.npz) and evaluates it on the whole
validation split (OUT/reference.json).
"""

from __future__ import annotations

import io
import json
import socket
import sys
from pathlib import Path

import numpy as np

TRAIN_FILES, PER_FILE, VAL_RECORDS = 4, 4, 10
CLASSES, SIDE, ROWS, BATCH, EPOCHS = 16, 8, 48, 3, 2


def write_records(root: Path) -> Path:
    """`train-0000k-of-00004` (4 records each, stored labels 4k+1..4k+4) and
    `validation-00000-of-00001` (10 records, stored labels 1..10) of 40 x 40 JPEGs."""
    import tensorflow as tf
    from PIL import Image

    from cvbench.data.tfrecord import imagenet_example

    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)

    def write(path: Path, labels: range) -> None:
        with tf.io.TFRecordWriter(str(path)) as writer:
            for label in labels:
                buf = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(buf, "JPEG")
                writer.write(
                    imagenet_example(
                        encoded=buf.getvalue(), height=40, width=40, label=label,
                        synset=f"n{label:08d}", text=f"class {label}",
                        filename=f"{path.name}_{label}.JPEG",
                    )
                )  # fmt: skip

    for k in range(TRAIN_FILES):
        labels = range(k * PER_FILE + 1, (k + 1) * PER_FILE + 1)
        write(root / f"train-{k:05d}-of-{TRAIN_FILES:05d}", labels)
    write(root / "validation-00000-of-00001", range(1, VAL_RECORDS + 1))
    return root


def build_model():
    """Conv + dense, no BatchNorm (per-rank batch statistics would differ from one process)."""
    import keras

    inputs = keras.Input((SIDE, SIDE, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(CLASSES, dtype="float32")(x)
    return keras.Model(inputs, outputs)


def make_trainer(*, seed: int, distribution: str):
    import keras

    from cvbench.training import OptimizerConfig, ScheduleConfig, TrainConfig, Trainer

    return Trainer(
        build_model,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        OptimizerConfig(momentum=0.9, nesterov=True, weight_decay=1e-3),
        schedule=ScheduleConfig(base_lr=2.0, warmup_steps=2, decay="cosine"),
        # float32 whatever the CPU: "auto" takes mixed_bfloat16 on CPUs with native bfloat16
        # (avx512_bf16, amx_bf16), whose rounding differs between 4 x 3 and 1 x 12 rows by
        # more than the float32 comparison allows (3.2e-5 on an AMX Xeon).
        precision="float32",
        distribution=distribution,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="top1")],
        config=TrainConfig(log_every=0, progress_bar=False, seed=seed, deterministic=True,
                           export=False),
    )  # fmt: skip


def weights(trainer) -> list[np.ndarray]:
    import keras

    return [keras.ops.convert_to_numpy(v.value) for v in trainer.model.variables]


def make_arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(ROWS, SIDE, SIDE, 3)).astype("float32")
    y = rng.integers(0, CLASSES, ROWS).astype("int32")
    return x, y


def reference(data: Path, out: Path, ranks: int) -> None:
    """One process at the global batch `ranks x BATCH`: OUT/reference.npz, and its evaluation
    of the whole validation split: OUT/reference.json."""
    from cvbench.data import imagenet_dataset

    trainer = make_trainer(seed=3, distribution="single")
    trainer.fit(make_arrays(), epochs=EPOCHS, batch_size=ranks * BATCH)
    np.savez(out / "reference.npz", *weights(trainer), step=trainer.state["step"])
    val = imagenet_dataset(data, "validation", batch_size=2, image_size=SIDE, training=False)
    (out / "reference.json").write_text(json.dumps(trainer.evaluate(val)))


def main(data: Path, out: Path) -> None:
    import os

    from cvbench.data import imagenet_dataset
    from cvbench.training.distributed import Horovod

    dist = Horovod()
    rank = dist.rank
    # 1. What this rank reads: one training epoch (no repeat) and the validation split.
    train = imagenet_dataset(data, "train", batch_size=2, image_size=SIDE, training=True,
                             repeat=False, seed=11)  # fmt: skip
    train_labels = [int(v) for _, y in train for v in y.numpy()]
    val = imagenet_dataset(data, "validation", batch_size=2, image_size=SIDE, training=False)
    val_labels = [
        int(v) for _, y, w in val for v, keep in zip(y.numpy(), w.numpy(), strict=True) if keep
    ]
    # 2. Data parallel against the single-process reference at the global batch.
    print(f"READ rank {rank}", flush=True)
    x, y = make_arrays()
    trainer = make_trainer(seed=3 + 97 * int(os.environ["HOROVOD_RANK"]), distribution=dist)
    trainer.fit((x, y), epochs=EPOCHS, batch_size=BATCH)
    np.savez(out / f"rank{rank}.npz", *weights(trainer), step=trainer.state["step"])
    print(f"TRAINED rank {rank}", flush=True)
    # 3. Each rank evaluates its shard; totals are summed over ranks.
    val = imagenet_dataset(data, "validation", batch_size=2, image_size=SIDE, training=False)
    evaluation = trainer.evaluate(val)
    result = {
        "rank": rank,
        "size": dist.size,
        "host": socket.gethostname(),
        "hosts": dist.hosts,
        "local_rank": dist.local_rank,
        "train_labels": train_labels,
        "val_labels": val_labels,
        "evaluation": evaluation,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "reference":
        reference(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
    else:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
