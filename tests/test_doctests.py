"""Every docstring example in the package runs and prints what it claims.

The modules are found from the source text (a `>>> ` line), so a new example is tested without
being listed here; each is imported and run with `doctest` (ELLIPSIS and NORMALIZE_WHITESPACE,
as the examples are written). An example that cannot run here is written as plain code, not
skipped: `# doctest: +SKIP` is refused, so every `>>> ` a user reads has run. Modules that do
not import TensorFlow are `backend_agnostic`: their examples run on JAX too.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cvbench"
# Examples that train a model for a few steps (tens of seconds on 2 cores).
SLOW = {"cvbench.tasks.runner"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_with_examples(root: Path = PACKAGE) -> dict[str, str]:
    """`dotted name -> source` of the package's modules with a `>>> ` line, sorted by name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if ">>> " in source:
            found[module_name(path, root)] = source
    return dict(sorted(found.items()))


def _param(name: str, source: str):
    marks = []
    if "import tensorflow" not in source:
        marks.append(pytest.mark.backend_agnostic)
    if name in SLOW:
        marks.append(pytest.mark.slow)
    return pytest.param(name, marks=marks, id=name)


def test_modules_are_found():
    # box_ops' and anchors' examples exist today; a broken scan would find none and let every
    # example go untested.
    names = modules_with_examples()
    assert {"cvbench.detection.box_ops", "cvbench.detection.anchors"} <= set(names)
    assert set(names) >= SLOW
    assert module_name(PACKAGE / "models" / "__init__.py") == "cvbench.models"


def test_no_skipped_examples():
    skipped = [
        f"{name}: {line.strip()}"
        for name, source in modules_with_examples().items()
        for line in source.splitlines()
        if "doctest: +SKIP" in line
    ]
    assert not skipped, "write examples that cannot run here as plain code:\n" + "\n".join(skipped)


@pytest.mark.parametrize("name", [_param(n, s) for n, s in modules_with_examples().items()])
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    assert tests, f"{name}: '>>> ' in the source but no docstring example found"
    failures = []
    for test in tests:
        out: list[str] = []
        if runner.run(test, out=out.append).failed:
            failures.append("".join(out))
    assert runner.summarize(verbose=False).attempted > 0
    assert not failures, "\n".join(failures)
