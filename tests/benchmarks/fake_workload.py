"""A workload for `ProcessWorkload`'s tests, loaded by path in the child process: it counts its
steps and says which process it ran in and which heavy runtimes that process imported."""

from __future__ import annotations

import os
import sys

HEAVY = ("keras", "tensorflow", "jax", "torch", "cvbench", "throughput_suite")


class CountingWorkload:
    def __init__(self, *, images_per_step: int, fail: str | None = None) -> None:
        if fail == "build":
            raise ValueError(f"cannot build with images_per_step={images_per_step}")
        self.images_per_step = images_per_step
        self.steps = 0
        self.fail = fail

    def first_step(self) -> None:
        self.steps += 1

    def run(self, steps: int) -> None:
        if self.fail == "die":
            print("the workload dies here", file=sys.stderr, flush=True)
            os._exit(3)
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        self.steps += steps

    def call(self) -> None:
        self.steps += 1

    def close(self) -> dict:
        return {
            "pid": os.getpid(),
            "steps": self.steps,
            "heavy": [m for m in HEAVY if m in sys.modules],
        }
