"""Runs the `cvbench` command with a hold at one checkpoint write (a test helper, not collected).

`CVBENCH_TEST_HOLD=<moment>:<step>` makes the process announce `HOLD <moment> <step>` on stdout
and sleep, so that a test can send it a real SIGKILL at that exact moment:

- `in_write`: the checkpoint of `<step>` is fully written to its temporary file, not yet
  renamed into place (the kill lands during the atomic write);
- `after_write`: the checkpoint of `<step>` has just been renamed into place;
- `after_step`: step `<step>` has been trained and logged (run with `--log-every 1`).

Everything else is the real command (`cvbench.cli.main`).
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


if __name__ == "__main__":
    hold = os.environ.get("CVBENCH_TEST_HOLD")
    if hold:
        moment, step = hold.split(":")
        _install_hold(moment, int(step))
    from cvbench.cli import main

    sys.exit(main(sys.argv[1:]))
