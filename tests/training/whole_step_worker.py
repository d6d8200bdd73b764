"""Horovod worker for the whole-step test (run under horovodrun as a script, not collected).

Every rank trains the tiny conv + BatchNorm classifier for 4 steps of 4 rows per rank, twice:
float32 with rank 1's third batch NaN, and mixed_float16 with rank 1's third batch scaled by
1e6 (beyond float16's range). Each rank saves OUT/<precision>-rank<r>.npz: every model and
optimizer variable before and after the third step, the final trainable weights, the steps'
`skipped` flags, the run's skipped count, the inner optimizer's iterations and the loss scale.
"""

from __future__ import annotations

import argparse
import os

import keras
import numpy as np
from training_helpers import images, tiny_classifier

from cvbench.training import TrainConfig, Trainer

BATCH, STEPS = 4, 4


class Snapshot(keras.callbacks.Callback):
    def __init__(self, trainer: Trainer) -> None:
        super().__init__()
        self.trainer, self.skipped, self.around = trainer, [], {}

    def values(self) -> list[np.ndarray]:
        variables = list(self.trainer.model.variables) + list(self.trainer.optimizer.variables)
        return [np.array(keras.ops.convert_to_numpy(v.value)) for v in variables]

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 2:
            self.around["before"] = self.values()

    def on_train_batch_end(self, batch, logs=None):
        self.skipped.append(float(logs["skipped"]))
        if batch == 2:
            self.around["after"] = self.values()


def run(precision: str, out: str) -> None:
    trainer = Trainer(
        tiny_classifier,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        schedule=0.1,
        precision=precision,
        distribution="horovod",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, loss_scale=1024.0),
    )
    x, y = images(2 * BATCH * STEPS)
    # Global batch 2 is rows [16, 24); rank 1 holds [20, 24).
    x[20:24] = x[20:24] * 1e6 if precision == "mixed_float16" else np.nan
    snapshot = Snapshot(trainer)
    trainer.fit((x, y), epochs=1, batch_size=BATCH, shuffle=False, callbacks=[snapshot])
    optimizer = trainer.optimizer
    on_purpose = [
        v is getattr(optimizer, "dynamic_scale", None) or v is getattr(optimizer, "step_counter", 0)
        for v in list(trainer.model.variables) + list(optimizer.variables)
    ]
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    changed = [
        i
        for i, (a, b, purpose) in enumerate(
            zip(snapshot.around["before"], snapshot.around["after"], on_purpose, strict=True)
        )
        if not purpose and a.tobytes() != b.tobytes()
    ]
    np.savez(
        os.path.join(out, f"{precision}-rank{trainer.rank}.npz"),
        *[keras.ops.convert_to_numpy(v.value) for v in trainer.model.trainable_variables],
        changed=np.array(changed, np.int64),
        skipped=np.array(snapshot.skipped),
        skipped_steps=trainer.state["skipped_steps"],
        iterations=int(keras.ops.convert_to_numpy(inner.iterations)),
        loss_scale=trainer.loss_scale if trainer.loss_scale is not None else -1.0,
        moving_finite=all(
            np.isfinite(keras.ops.convert_to_numpy(v.value)).all()
            for v in trainer.model.non_trainable_variables
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    for precision in ("float32", "mixed_float16"):
        run(precision, args.out)


if __name__ == "__main__":
    main()
