"""A rank that raises (a Python error, not a kill) ends the whole Horovod job with its
message: the survivors must not wait in a collective forever (slow: horovodrun)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).parents[1] / "training" / "worker.py"
HOROVODRUN = Path(sys.executable).with_name("horovodrun")
ENV = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


@pytest.mark.slow
def test_a_rank_that_raises_ends_every_rank_with_its_message(tmp_path):
    if not HOROVODRUN.exists():
        pytest.skip(f"no horovodrun next to {sys.executable} (scripts/build_horovod.sh)")
    run = subprocess.run(
        [str(HOROVODRUN), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable,
         str(WORKER), "raise", "--out", str(tmp_path)],
        capture_output=True, text=True, env=ENV, timeout=300,
    )  # fmt: skip
    ended = time.time()
    log = run.stdout + run.stderr
    assert run.returncode != 0, log[-3000:]
    # Rank 1's own error reaches the user, and no rank trained on to the end (50 epochs).
    assert "RuntimeError: injected failure on rank 1 at batch 2" in log
    assert "FAILURE_NOT_NOTICED" not in log
    raised = float(re.search(r"RAISE_TIME ([\d.]+)", log).group(1))
    assert ended - raised < 60, f"the job took {ended - raised:.1f} s to end after the error"
