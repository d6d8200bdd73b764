"""Multi-process Horovod training and SIGKILL/resume, run as subprocesses (slow).

Both start `worker.py` (next to this file): under `horovodrun -np 2 -H localhost:2 --gloo` on
CPU, and as a single process killed with SIGKILL and resumed.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).with_name("worker.py")
HOROVODRUN = Path(sys.executable).with_name("horovodrun")
ENV = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def weights(path):
    data = np.load(path)
    return [
        data[k]
        for k in sorted((k for k in data.files if k.startswith("arr_")), key=lambda k: int(k[4:]))
    ], data


@pytest.mark.slow
def test_two_horovod_ranks_train_like_one_process_and_fail_together(tmp_path):
    started = time.time()
    run = subprocess.run(
        [
            str(HOROVODRUN),
            "-np",
            "2",
            "-H",
            "localhost:2",
            "--gloo",
            sys.executable,
            str(WORKER),
            "horovod",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=400,
    )
    ended = time.time()
    log = run.stdout + run.stderr

    # Data parallel (rank-dependent initial weights, broadcast from rank 0) = one process on
    # the concatenated batch, and both ranks hold the same weights.
    reference, ref = weights(tmp_path / "reference.npz")
    rank0, meta0 = weights(tmp_path / "rank0.npz")
    rank1, meta1 = weights(tmp_path / "rank1.npz")
    assert int(meta0["size"]) == 2 and int(ref["size"]) == 1
    assert int(meta0["step"]) == int(ref["step"]) == 12
    for a, b, r in zip(rank0, rank1, reference, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, r, rtol=0, atol=1e-5)

    # An overflow on rank 1 only: both ranks skip that step (6 steps, 5 updates) and halve
    # their loss scale (256 -> 128) the same way.
    over0, o0 = weights(tmp_path / "overflow0.npz")
    over1, o1 = weights(tmp_path / "overflow1.npz")
    assert (int(o0["step"]), int(o0["iterations"]), float(o0["loss_scale"])) == (6, 5, 128.0)
    assert (int(o1["step"]), int(o1["iterations"]), float(o1["loss_scale"])) == (6, 5, 128.0)
    for a, b in zip(over0, over1, strict=True):
        np.testing.assert_array_equal(a, b)
    # A static scale: the same step skipped on both ranks, the scale left at 256.
    static0, s0 = weights(tmp_path / "static0.npz")
    static1, s1 = weights(tmp_path / "static1.npz")
    assert (int(s0["step"]), int(s0["iterations"]), float(s0["loss_scale"])) == (6, 5, 256.0)
    assert (int(s1["step"]), int(s1["iterations"]), float(s1["loss_scale"])) == (6, 5, 256.0)
    for a, b in zip(static0, static1, strict=True):
        np.testing.assert_array_equal(a, b)

    # Rank 1 exits abruptly: rank 0 fails with a clear error and the job ends non-zero quickly.
    assert run.returncode != 0
    assert "RankFailedError: rank 0: another rank failed or exited" in log
    assert "DEATH_NOT_NOTICED" not in log
    exit_time = float(re.search(r"EXIT_TIME ([\d.]+)", log).group(1))
    assert started < exit_time < ended < exit_time + 60


@pytest.mark.slow
def test_sigkill_then_resume_equals_the_uninterrupted_run(tmp_path):
    common = [sys.executable, str(WORKER), "train"]
    (tmp_path / "reference").mkdir()
    reference_log = open(tmp_path / "reference" / "log.txt", "w")  # noqa: SIM115
    reference = subprocess.Popen(
        common + ["--out", str(tmp_path / "reference")],
        env=ENV,
        stdout=reference_log,
        stderr=subprocess.STDOUT,
    )
    run_dir = tmp_path / "run"
    args = common + ["--out", str(tmp_path), "--log-dir", str(run_dir), "--checkpoint-every", "2"]
    victim = subprocess.Popen(
        args + ["--pause", "0.4"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wanted = run_dir / "checkpoints" / "ckpt-0000000004.npz"  # mid epoch 1 (12 steps per epoch)
    deadline = time.time() + 240
    while not wanted.exists() and victim.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    assert not (tmp_path / "train.npz").exists()  # it really died before the end
    assert wanted.exists()

    resumed = subprocess.run(
        args + ["--resume"], env=ENV, timeout=300, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout
    status = reference.wait(timeout=300)
    reference_log.close()
    assert status == 0, (tmp_path / "reference" / "log.txt").read_text()[-2000:]
    expected, _ = weights(tmp_path / "reference" / "train.npz")
    got, meta = weights(tmp_path / "train.npz")
    assert int(meta["step"]) == 24
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)
