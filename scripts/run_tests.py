"""Runs the test suite as `make test` does: one pytest process per part of tests/ (each
folder, then the top-level test files), with the same arguments, and one summary at the end.

Why not one process: TensorFlow and Keras keep memory across tests that no test can give
back (tf.data iterators and their thread pools held by exceptions and caches, traced
graphs of Keras' own `fit` in TensorFlow's gradient registry, the C++ allocators' heaps).
In one process CI's TensorFlow run grew by about 20 GB and was killed at 24 GiB, 61% of the
way; a process per part starts each from a fresh interpreter, so a part's peak is what that
part needs (a few GB).

    python scripts/run_tests.py -m "not heavy"              # what `make test` runs
    python scripts/run_tests.py -m "not heavy" -x -q        # any pytest options

Exit status: 0 when every part passed or selected no test (pytest's 5), else 1; the parts
that failed are named with their pytest status. `tests/test_run_tests.py` checks that the
parts cover every test file exactly once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
NO_TESTS_SELECTED = 5  # pytest's exit status when `-m` leaves a part nothing to run


def parts(tests: Path = TESTS) -> list[list[str]]:
    """The pytest arguments of each part: every folder of `tests` holding a test file, in
    name order, then the test files directly in `tests` together."""
    folders = sorted(
        p for p in tests.iterdir() if p.is_dir() and next(p.rglob("test_*.py"), None) is not None
    )
    top = sorted(tests.glob("test_*.py"))
    found = [[str(p.relative_to(tests.parent))] for p in folders]
    return found + ([[str(p.relative_to(tests.parent)) for p in top]] if top else [])


def main(argv: list[str]) -> int:
    failed: list[str] = []
    started = time.monotonic()
    for part in parts():
        print(f"== run_tests: {' '.join(part)}", flush=True)
        status = subprocess.call([sys.executable, "-m", "pytest", *argv, *part], cwd=ROOT)
        if status not in (0, NO_TESTS_SELECTED):
            failed.append(f"{' '.join(part)} (pytest exit status {status})")
    minutes = (time.monotonic() - started) / 60
    if failed:
        print(f"== run_tests: failed after {minutes:.1f} min: {'; '.join(failed)}", flush=True)
        return 1
    print(f"== run_tests: every part passed in {minutes:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
