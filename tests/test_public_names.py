"""What users read imports public names: the docs, the examples and the `cvbench` command
import a name from the package whose `__all__` lists it (`from cvbench.inference import
classify`), not from the module it happens to live in (`cvbench.inference.classification`),
when the two are the same object. Internals without a public name stay imported from their
modules."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The packages whose `__all__` names are checked.
PUBLIC = (
    "cvbench",
    "cvbench.benchmark",
    "cvbench.detection",
    "cvbench.inference",
    "cvbench.models",
    "cvbench.training",
    "cvbench.zoo",
)
#: Imports from these modules are not checked yet: cvbench.data and cvbench.tasks are being
#: reorganized and rewritten (their public names may move); remove an entry once it has.
NOT_CHECKED_MODULES = ("cvbench.data", "cvbench.tasks")
#: Command modules being rewritten: checked once the rewrite lands (then remove the entry).
NOT_CHECKED_FILES = ("cvbench/cli/benchmark.py", "cvbench/cli/train.py")
_FROM = re.compile(r"^\s*from (cvbench(?:\.\w+)+) import \(?([\w, ]+)\)?\s*$", re.M)


def _public_objects() -> dict[int, list[str]]:
    """`id(object) -> the public packages that list it`."""
    found: dict[int, list[str]] = {}
    for package in PUBLIC:
        module = importlib.import_module(package)
        for name in module.__all__:
            found.setdefault(id(getattr(module, name)), []).append(package)
    return found


def _python_sources() -> list[tuple[str, str]]:
    """`(label, source)` of the Python users read or run: the docs' code, the examples
    (scripts and notebooks) and the command's modules."""
    sources = []
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        sources.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
    for path in sorted((ROOT / "examples").rglob("*.py")):
        sources.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
    for path in sorted((ROOT / "examples").rglob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        sources.append((path.relative_to(ROOT).as_posix(), code))
    for path in sorted((ROOT / "cvbench" / "cli").glob("*.py")):
        label = path.relative_to(ROOT).as_posix()
        if label not in NOT_CHECKED_FILES:
            sources.append((label, path.read_text(encoding="utf-8")))
    return sources


def _imports(source: str) -> list[tuple[str, str]]:
    """`(module, name)` of each `from cvbench.x.y import name` in `source`: every such
    statement of Python code, else (Markdown) of each line that is one."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [
            (module, name.strip())
            for module, names in _FROM.findall(source)
            for name in names.split(",")
            if name.strip()
        ]
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cvbench.")
        for alias in node.names
    ]


def _private_imports(sources: list[tuple[str, str]]) -> list[str]:
    """`label: from module import name (public in ...)` for each import of a public object
    from a module that is not one of its public packages."""
    public = _public_objects()
    found = []
    for label, source in sources:
        for module, name in _imports(source):
            if module in PUBLIC or module.startswith(("cvbench.cli", *NOT_CHECKED_MODULES)):
                continue
            value = getattr(importlib.import_module(module), name, None)
            if value is not None and id(value) in public:
                packages = " or ".join(public[id(value)])
                found.append(f"{label}: from {module} import {name} (public in {packages})")
    return found


def test_docs_examples_and_the_command_import_public_names_from_their_package():
    sources = _python_sources()
    assert {"docs/using_models.md", "cvbench/cli/predict.py"} <= {label for label, _ in sources}
    assert _private_imports(sources) == []


def test_the_check_sees_a_public_name_imported_from_its_module():
    markdown = "```python\nfrom cvbench.inference.classification import classify\n```\n"
    code = "def f():\n    from cvbench.utils.model_file import MAX_INPUT_SIDE, load_model\n"
    assert _private_imports([("a.md", markdown), ("b.py", code)]) == [
        "a.md: from cvbench.inference.classification import classify (public in cvbench or "
        "cvbench.inference)",
        "b.py: from cvbench.utils.model_file import load_model (public in cvbench or "
        "cvbench.inference)",
    ]
    assert _private_imports([("c.py", "from cvbench.inference import classify\n")]) == []
