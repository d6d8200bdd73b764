"""Horovod worker of `test_t49_horovod_resume.py` (run under horovodrun as a script; it holds
no test).

Every rank trains the tests' tiny classifier for 2 epochs of 4 steps (4 images per rank and
step, each rank its own shard), checkpointing every 3 steps, into OUT/full. Rank 0 then
copies the run to OUT/cut without the checkpoints after step 3 (as if the run had been
killed after step 3, in the first epoch), and every rank resumes it. Each rank saves
OUT/rank<r>.json: both runs' epoch records (the History) and the step-3 checkpoint's
per-rank sums.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import keras
from training_helpers import images, sparse_ce, tiny_classifier

from cvbench.training import OptimizerConfig, TrainConfig, Trainer
from cvbench.training.checkpoint import read_checkpoint_meta

BATCH, STEPS, EPOCHS = 4, 4, 2


def trainer(log_dir: Path, *, resume: bool) -> Trainer:
    config = TrainConfig(
        log_every=0, progress_bar=False, seed=0, export=False, checkpoint_every=3,
        keep_checkpoints=10, log_dir=str(log_dir), resume=resume,
    )  # fmt: skip
    return Trainer(
        tiny_classifier,
        sparse_ce(),
        OptimizerConfig(momentum=0.9),
        schedule=0.1,
        precision="float32",
        distribution="horovod",
        metrics=["accuracy"],
        config=config,
    )


def fit(trainer: Trainer) -> dict:
    data = images(2 * BATCH * STEPS)
    history = trainer.fit(data, epochs=EPOCHS, batch_size=BATCH, shuffle=False)
    return {k: [float(v) for v in values] for k, values in history.history.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    out = Path(parser.parse_args().out)
    full_run = trainer(out / "full", resume=False)
    full = fit(full_run)
    if full_run.is_chief:
        shutil.copytree(out / "full", out / "cut")
        for path in (out / "cut" / "checkpoints").iterdir():
            if int(path.stem.split("-")[1]) > 3:
                path.unlink()
    full_run.distribution.broadcast_object(None)  # the others wait for the copy
    resumed = trainer(out / "cut", resume=True)
    cut = fit(resumed)
    meta = read_checkpoint_meta(out / "full" / "checkpoints" / "ckpt-0000000003.npz")
    record = {"full": full, "resumed": cut, "state": meta["state"], "keras": keras.__version__}
    (out / f"rank{resumed.rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
