"""Subprocess worker for the Horovod and kill/resume tests (run as a script, not collected).

Modes:
    train     one process: train the tiny model on the seeded arrays (optionally with
              checkpoints, a resume and a pause per step) and save the final state to
              OUT/train.npz.
    horovod   every rank runs, in order:
              1. the single-process reference on the concatenated batch (no collectives),
                 saved by rank 0 to OUT/reference.npz;
              2. the same training data-parallel (rank-dependent initial weights, so only
                 the broadcast from rank 0 can make them agree): OUT/rank<r>.npz;
              3. mixed_float16 with fp16 gradient compression, rank 1's second batch
                 overflowing: OUT/overflow<r>.npz;
              4. rank 1 exits abruptly at step 3 (printing the time); the others must fail
                 with a RankFailedError instead of hanging.
    raise     every rank trains; rank 1 raises an exception in the middle of step 3 (not a
              kill: a Python error, printing the time first); the job must end on every rank
              with rank 1's message.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import keras
import numpy as np

from cvbench.training import OptimizerConfig, ScheduleConfig, TrainConfig, Trainer

ROWS, SIDE, CLASSES, BATCH = 48, 8, 5, 4


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


def make_trainer(*, seed: int, distribution: str, precision: str = "float32", **config) -> Trainer:
    return Trainer(
        build_model,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        OptimizerConfig(momentum=0.9, nesterov=True, weight_decay=1e-3),
        schedule=ScheduleConfig(base_lr=2.0, warmup_steps=2, decay="cosine"),
        precision=precision,
        distribution=distribution,
        config=TrainConfig(
            log_every=0, progress_bar=False, seed=seed, deterministic=True, export=False, **config
        ),
    )


def save_state(path: str, trainer: Trainer) -> None:
    inner = getattr(trainer.optimizer, "inner_optimizer", trainer.optimizer)
    np.savez(
        path,
        *[keras.ops.convert_to_numpy(v.value) for v in trainer.model.variables],
        size=trainer.size,
        step=trainer.state["step"],
        iterations=int(keras.ops.convert_to_numpy(inner.iterations)),
        loss_scale=trainer.loss_scale if trainer.loss_scale is not None else -1.0,
    )


class Pause(keras.callbacks.Callback):
    """Sleeps after every step, so that a test can kill the run in the middle."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


class ExitAtBatch(keras.callbacks.Callback):
    """Ends this process abruptly (no clean-up, exit status 3) after batch `batch`."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch = batch

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            print(f"EXIT_TIME {time.time():.3f}", flush=True)
            os._exit(3)


class RaiseAtBatch(keras.callbacks.Callback):
    """Raises a `RuntimeError` naming this rank after batch `batch` (a bug, not a kill)."""

    def __init__(self, batch: int, rank: int) -> None:
        super().__init__()
        self.batch, self.rank = batch, rank

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            print(f"RAISE_TIME {time.time():.3f}", flush=True)
            raise RuntimeError(f"injected failure on rank {self.rank} at batch {batch}")


def run_raise(args: argparse.Namespace) -> None:
    trainer = make_trainer(seed=6, distribution="horovod")
    callbacks = [RaiseAtBatch(2, trainer.rank)] if trainer.rank == 1 else []
    trainer.fit(make_data(), epochs=50, batch_size=BATCH, callbacks=callbacks)
    print("FAILURE_NOT_NOTICED", flush=True)


def run_train(args: argparse.Namespace) -> None:
    trainer = make_trainer(
        seed=3,
        distribution="single",
        log_dir=args.log_dir,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=3,
        resume=args.resume,
    )
    callbacks = [Pause(args.pause)] if args.pause else []
    trainer.fit(make_data(), epochs=2, batch_size=BATCH, callbacks=callbacks)
    save_state(os.path.join(args.out, "train.npz"), trainer)


def run_horovod(args: argparse.Namespace) -> None:
    x, y = make_data()
    # 1. Reference: one process, global batch 2 * BATCH (what both ranks see together).
    reference = make_trainer(seed=3, distribution="single")
    reference.fit((x, y), epochs=2, batch_size=2 * BATCH)
    # 2. Data parallel. The seed differs per rank (so do the initial weights): only the
    # broadcast from rank 0 can make the ranks agree with the reference (seed 3).
    rank = int(os.environ["HOROVOD_RANK"])
    trainer = make_trainer(seed=3 + 97 * rank, distribution="horovod")
    if trainer.rank == 0:
        save_state(os.path.join(args.out, "reference.npz"), reference)
    trainer.fit((x, y), epochs=2, batch_size=BATCH, shuffle=True)
    save_state(os.path.join(args.out, f"rank{trainer.rank}.npz"), trainer)
    # 3. mixed_float16: global batch 1 is rows [2B, 4B), rank 1 holds [3B, 4B); values beyond
    # float16's range make only that rank's gradients non-finite.
    x16 = x.copy()
    x16[3 * BATCH : 4 * BATCH] = 1e6
    # The allreduce also compresses the (still scaled) gradients to float16.
    fp16 = make_trainer(
        seed=5,
        distribution="horovod",
        precision="mixed_float16",
        loss_scale=256.0,
        compression="fp16",
    )
    fp16.fit((x16, y), epochs=1, batch_size=BATCH, shuffle=False)
    save_state(os.path.join(args.out, f"overflow{fp16.rank}.npz"), fp16)
    # 3b. The same under a static loss scale (NVIDIA's --static_loss_scale): skipped alike.
    static = make_trainer(
        seed=5,
        distribution="horovod",
        precision="mixed_float16",
        loss_scale=256.0,
        dynamic_loss_scale=False,
        compression="fp16",
    )
    static.fit((x16, y), epochs=1, batch_size=BATCH, shuffle=False)
    save_state(os.path.join(args.out, f"static{static.rank}.npz"), static)
    # 4. A rank dies.
    dying = make_trainer(seed=6, distribution="horovod")
    callbacks = [ExitAtBatch(2)] if dying.rank == 1 else []
    dying.fit((x, y), epochs=1, batch_size=BATCH, callbacks=callbacks)
    print("DEATH_NOT_NOTICED", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["train", "horovod", "raise"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--pause", type=float, default=0.0)
    args = parser.parse_args()
    {"train": run_train, "horovod": run_horovod, "raise": run_raise}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
