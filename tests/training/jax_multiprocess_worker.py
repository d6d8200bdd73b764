"""One process of the 2-process JAX runs of test_jax_multiprocess.py (or, with process count
1, the one-process reference). Usage:

    jax_multiprocess_worker.py PHASE RUN_DIR PROCESS_ID NUM_PROCESSES PORT

PHASE "train": 2 epochs, a checkpoint every 2 steps; "resume": the same run with
`resume=True`; "evaluate": the newest checkpoint's weights evaluated. Prints `RESULT {json}`
on process 0: the trainer state, the evaluation, the weights' checksum and the ranks.
"""

from __future__ import annotations

import json
import os
import sys

PHASE, RUN_DIR, PROCESS_ID, NUM_PROCESSES, PORT = sys.argv[1:6]
if int(NUM_PROCESSES) > 1:
    os.environ.update(
        KERAS_DISTRIBUTION_JOB_ADDRESSES=f"localhost:{PORT}",
        KERAS_DISTRIBUTION_NUM_PROCESSES=NUM_PROCESSES,
        KERAS_DISTRIBUTION_PROCESS_ID=PROCESS_ID,
    )

import keras  # noqa: E402
import numpy as np  # noqa: E402

from cvbench.training import OptimizerConfig, TrainConfig, Trainer  # noqa: E402

# 30 training rows: 15 per process, batches of 4 per process (the last evaluation batch of
# each process is padded: 15 = 3 x 4 + 3).
ROWS, BATCH = 30, 4


def build() -> keras.Model:
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3)(hidden))


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 4)).astype("float32")
    y = rng.integers(0, 3, ROWS).astype("int32")
    trainer = Trainer(
        build,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        OptimizerConfig(name="sgd", momentum=0.9),
        schedule=0.1,
        precision="float32",
        distribution="auto" if int(NUM_PROCESSES) > 1 else "single",
        metrics=["accuracy"],  # by name: a metric object made here would start JAX first
        config=TrainConfig(
            log_dir=RUN_DIR,
            checkpoint_every=2,
            keep_checkpoints=10,
            log_every=0,
            progress_bar=False,
            seed=0,
            export=False,
            resume=PHASE == "resume",
        ),  # fmt: skip
    )
    if PHASE == "evaluate":
        from cvbench.training.checkpoint import find_checkpoint

        trainer.load_weights(find_checkpoint(RUN_DIR))
    else:
        trainer.fit((x, y), epochs=2, batch_size=BATCH)
    results = trainer.evaluate((x, y), batch_size=BATCH)
    weights = np.concatenate(
        [np.ravel(keras.ops.convert_to_numpy(v)) for v in trainer.model.weights]
    )
    if trainer.is_chief:
        report = {
            "state": trainer.state, "evaluation": results, "ranks": trainer.size,
            "devices": trainer.distribution.num_devices, "weights": float(np.abs(weights).sum()),
        }  # fmt: skip
        print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
