"""`scripts/run_tests.py` (what `make test` and CI run): its parts cover every test file
exactly once, `make test` runs through it, and its exit status says whether a part failed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("run_tests", ROOT / "scripts" / "run_tests.py")
run_tests = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(run_tests)


def _files(part: list[str]) -> set[Path]:
    found = set()
    for arg in part:
        path = ROOT / arg
        found |= set(path.rglob("test_*.py")) if path.is_dir() else {path}
    return found


def test_the_parts_cover_every_test_file_once():
    parts = run_tests.parts()
    every = set((ROOT / "tests").rglob("test_*.py"))
    covered = [f for part in parts for f in _files(part)]
    assert len(covered) == len(set(covered))  # no file in two parts: no test runs twice
    assert set(covered) == every
    assert ["tests/cli"] in parts and ["tests/docs"] in parts  # one process per folder


def test_parts_of_a_tree(tmp_path):
    for name in ("a/test_x.py", "a/sub/test_y.py", "b/helper.py", "test_top.py", "test_z.py"):
        (tmp_path / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / name).write_text("")
    # b holds no test file: no part; the top-level files run together, last.
    assert run_tests.parts(tmp_path / "tests") == [
        ["tests/a"],
        ["tests/test_top.py", "tests/test_z.py"],
    ]


def test_make_test_runs_the_suite_through_it():
    makefile = (ROOT / "Makefile").read_text()
    test_target = makefile.split("\ntest: ")[1].split("\n\n")[0]
    assert test_target.count("$(RUN_TESTS)") == 2
    assert "RUN_TESTS := $(PY) scripts/run_tests.py" in makefile


def test_a_failing_part_fails_the_run_and_is_named(tmp_path, monkeypatch):
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    (tmp_path / "test_good.py").write_text("def test_good():\n    pass\n")
    monkeypatch.setattr(run_tests, "ROOT", tmp_path)
    parts = [["test_good.py"], ["test_bad.py"]]
    monkeypatch.setattr(run_tests, "parts", lambda: parts)
    args = ["-q", "-p", "no:cacheprovider", "-c", "/dev/null"]
    assert run_tests.main(args) == 1
    parts[:] = [["test_good.py"]]
    assert run_tests.main(args) == 0
    # Nothing selected (pytest's 5) is no failure: the JAX run selects no test in some parts.
    assert run_tests.main([*args, "-m", "no_such_mark"]) == 0


def test_the_script_runs_from_anywhere(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_tests.py"), "--collect-only", "-q",
         "-p", "no:cacheprovider", "--version"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-1000:]
    assert "every part passed" in done.stdout
