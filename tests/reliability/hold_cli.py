"""Runs the `cvbench` command with a hold at one checkpoint write (a test helper, not collected).

`CVBENCH_TEST_HOLD=<moment>:<step>` makes the process announce `HOLD <moment> <step>` on stdout
and sleep, so that a test can send it a real SIGKILL at that exact moment:

- `in_write`: the checkpoint of `<step>` is fully written to its temporary file, not yet
  renamed into place (the kill lands during the atomic write);
- `after_write`: the checkpoint of `<step>` has just been renamed into place;
- `after_step`: step `<step>` has been trained and logged (run with `--log-every 1`).

`CVBENCH_TEST_NAN_STEPS=<k>[,<k>...]` makes the batches of those training steps (counted from
1 in this process) NaN, so that the real command meets a step whose loss and gradients are not
finite (it must skip it, changing no variable).

`CVBENCH_TEST_STEP_DELAY=<seconds>` makes every logged step take that much longer (run with
`--log-every 1`), so that a signal sent after a step's line lands mid-epoch.

Everything else is the real command (`cvbench.cli.run`).
"""

from __future__ import annotations

import os
import re
import sys
import time

_CHECKPOINT = re.compile(r"^ckpt-(\d{10})\.npz$")


def _install_hold(moment: str, step: int) -> None:
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        match = _CHECKPOINT.match(os.path.basename(os.fspath(dst)))
        held = match is not None and int(match.group(1)) == step
        if held and moment == "in_write":
            print(f"HOLD in_write {step}", flush=True)
            time.sleep(600)
        real_replace(src, dst, *args, **kwargs)
        if held and moment == "after_write":
            print(f"HOLD after_write {step}", flush=True)
            time.sleep(600)

    os.replace = replace
    if moment == "after_step":
        from cvbench.training.run_log import RunLog

        real_record = RunLog.record

        def record(self, event, **fields):
            real_record(self, event, **fields)
            if event == "step" and fields.get("step") == step:
                print(f"HOLD after_step {step}", flush=True)
                time.sleep(600)

        RunLog.record = record


def _install_nan_steps(steps: set[int]) -> None:
    import numpy as np

    from cvbench.training.training_model import TrainingModel

    real = TrainingModel.train_on_batch
    calls = [0]

    def nan_floats(value):
        array = np.asarray(value)
        return np.full_like(array, np.nan) if array.dtype.kind == "f" else value

    def train_on_batch(self, x, *args, **kwargs):
        calls[0] += 1
        if calls[0] in steps:
            import keras

            x = keras.tree.map_structure(nan_floats, x)
        return real(self, x, *args, **kwargs)

    TrainingModel.train_on_batch = train_on_batch


def _install_step_delay(seconds: float) -> None:
    from cvbench.training.run_log import RunLog

    real_record = RunLog.record

    def record(self, event, **fields):
        real_record(self, event, **fields)
        if event == "step":
            time.sleep(seconds)

    RunLog.record = record


if __name__ == "__main__":
    delay = os.environ.get("CVBENCH_TEST_STEP_DELAY")
    if delay:
        _install_step_delay(float(delay))
    nan_steps = os.environ.get("CVBENCH_TEST_NAN_STEPS")
    if nan_steps:
        _install_nan_steps({int(k) for k in nan_steps.split(",")})
    hold = os.environ.get("CVBENCH_TEST_HOLD")
    if hold:
        moment, step = hold.split(":")
        _install_hold(moment, int(step))
    from cvbench.cli import run

    run(sys.argv[1:])
