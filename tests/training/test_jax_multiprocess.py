"""Two JAX processes x 2 CPU devices on localhost (`jax.distributed` through
`keras.distribution.initialize`): they train, rank 0 alone checkpoints, the run resumes, and
the evaluation counts every record exactly once (the same results as one process over all
rows). `jax_multiprocess_worker.py` (next to this file) is each process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
ENV = dict(os.environ, KERAS_BACKEND="jax", JAX_NUM_CPU_DEVICES="2", TF_CPP_MIN_LOG_LEVEL="2",
           PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))  # fmt: skip


def run(phase: str, run_dir: Path, processes: int = 2) -> dict:
    """Runs `phase` in `processes` processes; returns process 0's report."""
    port = str(free_port())
    worker = [sys.executable, str(HERE / "jax_multiprocess_worker.py"), phase, str(run_dir)]
    procs = [
        subprocess.Popen(
            [*worker, str(i), str(processes), port],
            env=ENV,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for i in range(processes)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=400)[0])
    finally:
        for proc in procs:
            proc.kill()
    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out[-3000:]
    (line,) = [x for x in outputs[0].splitlines() if x.startswith("RESULT ")]
    for out in outputs[1:]:  # only rank 0 reports
        assert not any(x.startswith("RESULT ") for x in out.splitlines())
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.slow
def test_two_processes_train_checkpoint_once_resume_and_evaluate_exactly_once(tmp_path):
    run_dir = tmp_path / "run"
    trained = run("train", run_dir)
    assert (trained["ranks"], trained["devices"]) == (2, 4)
    # 30 rows, 15 per process, batches of 4 per process: 3 steps per epoch (the shorter
    # shard's count, 15 // 4), 2 epochs = 6 steps; a checkpoint every 2 steps and at each
    # epoch end (3), by rank 0 only (both processes share the folder: one file per step, no
    # temporaries left).
    assert trained["state"]["step"] == 6
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == [f"ckpt-000000000{step}.npz" for step in (2, 3, 4, 6)]
    # One process, the same weights, every row once: the same results (padding rows of each
    # process' last batch weigh 0; metric states are global, not summed again).
    alone = run("evaluate", run_dir, processes=1)
    assert alone["weights"] == pytest.approx(trained["weights"], rel=1e-6)
    for name in ("loss", "accuracy"):
        assert trained["evaluation"][name] == pytest.approx(alone["evaluation"][name], abs=1e-6)
    # A run cut after step 4 (its last checkpoints gone) resumes from step 4 and ends where
    # the uninterrupted run ended.
    for step in (6,):
        (run_dir / "checkpoints" / f"ckpt-000000000{step}.npz").unlink()
    resumed = run("resume", run_dir)
    assert resumed["state"]["step"] == 6 and resumed["state"]["epoch"] == 2
    assert resumed["weights"] == pytest.approx(trained["weights"], rel=1e-6)
    assert resumed["evaluation"] == pytest.approx(trained["evaluation"], abs=1e-6)
    log = [json.loads(x) for x in (run_dir / "train_log.jsonl").read_text().splitlines()]
    starts = [e for e in log if e["event"] == "start"]
    assert len(starts) == 2  # rank 0's log only: one start per run, not one per process
