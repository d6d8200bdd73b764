"""JAX data parallelism over 4 CPU devices (`keras.distribution.DataParallel`), run in a
subprocess: `JAX_NUM_CPU_DEVICES` must be set before JAX starts, so the rest of the suite
keeps its one device. `jax_dp_worker.py` (next to this file) runs the scenarios.

Each run trains from the same seeded weights on the same batches (no shuffle):
`Trainer(distribution="auto")` on 4 devices with 8 rows per step (2 per device) against
`"single"` with the same 8 rows on one device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
ENV = dict(
    os.environ,
    KERAS_BACKEND="jax",
    JAX_NUM_CPU_DEVICES="4",
    TF_CPP_MIN_LOG_LEVEL="2",
    PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]),
)


def run_scenarios(*names: str) -> dict[str, dict]:
    run = subprocess.run(
        [sys.executable, str(HERE / "jax_dp_worker.py"), *names],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=500,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = {}
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            _, name, payload = line.split(" ", 2)
            results[name] = json.loads(payload)
    return results


@pytest.fixture(scope="module")
def small_runs():
    return run_scenarios("dense", "batchnorm", "skip")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["dense", "batchnorm"])
def test_four_devices_train_as_one_device_on_the_whole_batch(small_runs, model):
    result = small_runs[model]
    # "auto" picked keras.distribution with its variables replicated on all 4 devices.
    assert result["distribution"] == "jax"
    assert result["devices"] == 4 and result["replicated"]
    assert result["moved"] > 1e-3  # 3 steps changed the weights...
    assert result["vs_single"] < 1e-5  # ...exactly as one device on all 8 rows did
    # With batch norm, equal only because the statistics are the global batch's (8 rows), not
    # each device's 2. And the first device's rows alone train otherwise: gradients were
    # averaged over the devices' different data.
    assert result["vs_first_shard"] > 1e-3


@pytest.mark.slow
def test_a_nan_on_one_device_skips_the_step_on_every_device(small_runs):
    result = small_runs["skip"]
    # Rows 6-7 (the 4th device's) are NaN: the one step is skipped, counted once, and no
    # variable changed (batch-norm moving statistics included) on any device.
    assert result["skipped_steps"] == 1 and result["step"] == 1
    assert result["changed"] == 0.0 and result["finite"]


@pytest.mark.slow
def test_resnet18_with_batch_norm_on_four_devices_equals_one_device():
    result = run_scenarios("resnet18")["resnet18"]
    assert result["devices"] == 4 and result["moved"] > 1e-3
    # 2 steps of 8 images of 32 x 32; float32 sums over differently split batches round
    # differently: |a - b| / max(1, |b|) of every variable (moving variances included).
    assert result["vs_single_relative"] < 1e-4


@pytest.mark.slow
def test_fp16_and_a_detector_on_four_devices_train_as_one_device():
    results = run_scenarios("fp16", "detection")
    fp16 = results["fp16"]
    # mixed_float16 with dynamic loss scaling: 3 steps of 8 rows, none skipped on either, the
    # same loss scale (2**15, Keras' start, no overflow in 3 steps), weights to fp16 rounding
    # of differently split sums (relative 1e-4, as the ResNet-18 check)
    assert fp16["devices"] == 4 and fp16["policy"] == "mixed_float16"
    assert fp16["steps"] == [3, 3] and fp16["skipped"] == [0, 0]
    assert fp16["scales"][0] == fp16["scales"][1] == 2.0**15
    assert fp16["moved"] > 1e-3 and fp16["vs_single_relative"] < 1e-4
    det = results["detection"]
    # DetectionTask (SSD, ResNet-18 backbone, batch norms trained: global statistics), one
    # step of 8 synthetic images, then its evaluation: the same weights as one device
    assert det["devices"] == 4 and det["distribution"] == "jax" and det["steps"] == [1, 1]
    assert det["vs_single_relative"] < 1e-4
    assert det["metrics"][0] == det["metrics"][1]
