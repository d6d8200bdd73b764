"""Subprocess worker for the multi-process and kill/resume tests (run as a script).

Modes:
    train     train a tiny model on seeded arrays; write the final variables to
              OUT/rank<r>.npz (used under horovodrun and as the single-process reference).
    overflow  like train under mixed_float16, with rank 1's batch at step 2 overflowing.
    die       rank 1 exits abruptly at step 3; the others must fail, not hang.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import keras
import numpy as np

from cvbench.training import OptimizerConfig, ScheduleConfig, TrainConfig, Trainer

ROWS, SIDE, CLASSES = 48, 8, 5


def build_model() -> keras.Model:
    """Conv + dense, no BatchNorm (per-rank batch statistics would differ from one process)."""
    inputs = keras.Input((SIDE, SIDE, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(CLASSES, dtype="float32")(x)
    return keras.Model(inputs, outputs)


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(ROWS, SIDE, SIDE, 3)).astype("float32")
    y = rng.integers(0, CLASSES, ROWS).astype("int32")
    return x, y


class _Sleep(keras.callbacks.Callback):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


class _Die(keras.callbacks.Callback):
    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def on_train_batch_end(self, batch, logs=None):
        if self.rank == 1 and batch == 2:
            print(f"rank 1 exits at {time.time():.3f}", flush=True)
            os._exit(3)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["train", "overflow", "die"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()

    precision = "mixed_float16" if args.mode == "overflow" else "float32"
    config = TrainConfig(
        log_dir=args.log_dir,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        log_every=0,
        progress_bar=False,
        seed=3,
        deterministic=True,
        export=False,
    )
    trainer = Trainer(
        build_model,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        OptimizerConfig(name=args.optimizer, momentum=0.9, nesterov=True, weight_decay=1e-3),
        schedule=ScheduleConfig(base_lr=2.0, warmup_steps=2, decay="cosine"),
        precision=precision,
        config=config,
    )
    x, y = make_data()
    if args.mode == "overflow":
        # Global batch 1 (the second step) is rows [2B, 4B); rank 1 holds [3B, 4B). A value
        # beyond float16's range makes that rank's loss and gradients non-finite.
        b = args.batch_size
        x[3 * b : 4 * b] = 1e6
    callbacks = []
    if args.sleep:
        callbacks.append(_Sleep(args.sleep))
    if args.mode == "die":
        callbacks.append(_Die(trainer.rank))
    trainer.fit(
        (x, y), epochs=args.epochs, batch_size=args.batch_size, callbacks=callbacks, shuffle=True
    )
    optimizer = trainer.optimizer
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    np.savez(
        os.path.join(args.out, f"rank{trainer.rank}.npz"),
        *[keras.ops.convert_to_numpy(v.value) for v in trainer.model.variables],
        size=trainer.size,
        iterations=int(keras.ops.convert_to_numpy(inner.iterations)),
        loss_scale=trainer.loss_scale if trainer.loss_scale is not None else -1.0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
