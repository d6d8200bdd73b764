"""What the grain kill/resume tests share: a folder where TensorFlow cannot be imported,
`cvbench train` started through tests/reliability/hold_cli.py (which can hold after a step,
for a real SIGKILL there), a run killed at its hold, and a finished run's state (the final
checkpoint's arrays and every step's logged loss)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

HOLD_CLI = Path(__file__).resolve().parent / "reliability" / "hold_cli.py"


def tensorflow_blocker(root: Path) -> Path:
    """`root`, holding a `tensorflow` package that fails to import (put first on PYTHONPATH)."""
    (root / "tensorflow").mkdir(parents=True)
    (root / "tensorflow" / "__init__.py").write_text("raise ImportError('no TensorFlow')\n")
    return root


def start_train(
    argv: Sequence[str],
    log_dir: Path,
    blocker: Path,
    *extra: str,
    hold: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen:
    """`cvbench <argv> --log-dir LOG_DIR <extra>` on JAX with TensorFlow blocked; with `hold`
    (e.g. "after_step:5") it prints `HOLD after_step 5` there and waits to be killed."""
    environment = dict(
        os.environ, KERAS_BACKEND="jax", PYTHONUNBUFFERED="1", PYTHONPATH=str(blocker)
    )
    environment.update(env or {})
    if hold:
        environment["CVBENCH_TEST_HOLD"] = hold
    return subprocess.Popen(
        [sys.executable, str(HOLD_CLI), *argv, "--log-dir", str(log_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=environment,
        text=True,
    )


def finish(process: subprocess.Popen) -> str:
    """The output of a run that must succeed."""
    out, _ = process.communicate(timeout=900)
    assert process.returncode == 0, out[-3000:]
    return out


def kill_at_hold(processes: Sequence[subprocess.Popen], after_step: int) -> None:
    """SIGKILL every process once the first prints that it holds after `after_step` (the
    others wait for it in the next step's collective)."""
    lines = []
    try:
        for line in processes[0].stdout:
            lines.append(line)
            if line.startswith(f"HOLD after_step {after_step}"):
                break
    finally:
        for p in processes:
            p.send_signal(signal.SIGKILL)
    for p in processes:
        p.wait(60)
        assert p.returncode == -signal.SIGKILL, "".join(lines[-30:])


def final_state(log_dir: Path, step: int) -> tuple[list[np.ndarray], dict[int, float]]:
    """The arrays of the checkpoint of `step` and every step's loss (a step replayed after a
    resume: its resumed value)."""
    with np.load(log_dir / "checkpoints" / f"ckpt-{step:010d}.npz") as data:
        arrays = [data[k] for k in sorted(data.files) if k != "meta"]
    losses = {}
    for line in (log_dir / "train_log.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("event") == "step":
            losses[entry["step"]] = entry["loss"]
    return arrays, losses


def assert_same_run(got: tuple, want: tuple, steps: int) -> None:
    """Every step's loss and every final array of two runs bit-identical."""
    (arrays, losses), (ref_arrays, ref_losses) = got, want
    assert sorted(losses) == list(range(1, steps + 1)) and losses == ref_losses  # exact floats
    assert len(arrays) == len(ref_arrays)
    for a, b in zip(arrays, ref_arrays, strict=True):
        np.testing.assert_array_equal(a, b)
