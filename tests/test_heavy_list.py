"""`tests/heavy_tests.txt`: each id names one collected test, which `-m heavy` selects and
`-m "not heavy"` (`make test`, CI) leaves out; the Makefile's targets say so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _listed() -> list[str]:
    lines = (ROOT / "tests" / "heavy_tests.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _collect(marks: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", marks, "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_every_listed_id_is_one_heavy_test_and_make_test_leaves_them_out():
    listed = _listed()
    assert len(set(listed)) == len(listed), "an id is listed twice"
    heavy = _collect("heavy")
    assert sorted(heavy) == sorted(listed)
    assert not set(_collect("not heavy")) & set(listed)
    makefile = (ROOT / "Makefile").read_text()
    test_target = makefile.split("\ntest: ")[1].split("\n\n")[0]
    assert '-m "not heavy"' in test_target and '-m "backend_agnostic and not heavy"' in test_target
