"""The package's layers: no import circle (through importlib names and a package's `__init__`
too), imports only downward, every module importable alone (docs/architecture.md draws the
same picture)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cvbench"

# Each part of the package and the parts it may import (directly or through a function-level
# import). Anything not listed is a layering error; `cvbench` itself (the lazy top level)
# imports nothing statically.
ALLOWED = {
    "utils": set(),
    "registry": set(),
    "data": {"utils"},
    "models": {"utils"},
    "training": {"utils"},
    "detection": {"data", "models", "utils"},
    "zoo": {"detection", "models", "registry"},
    "tasks": {"data", "detection", "registry", "training", "utils", "zoo"},
    "benchmark": {"data", "detection", "models", "tasks", "training", "utils", "zoo"},
    "inference": {"data", "detection", "models", "utils", "zoo"},
    "demo": {"data", "detection", "inference", "models", "tasks", "training", "utils", "zoo"},
    "cli": {
        "benchmark",
        "data",
        "demo",
        "inference",
        "tasks",
        "training",
        "utils",
        "zoo",
        "cvbench",
    },
    "__main__": {"cli"},
    "cvbench": set(),
}


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path], *, top_level_only: bool) -> set[str]:
    """The cvbench modules `path` imports (`from pkg import submodule` counts as the
    submodule); with `top_level_only`, only statements run at import time."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cvbench"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("cvbench"))
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "cvbench"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as a list of nodes, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_cycle_finder_finds_a_cycle_and_accepts_a_dag():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_between_modules():
    modules = _modules()
    graph = {m: _imports(p, modules, top_level_only=True) - {m} for m, p in modules.items()}
    # A package's __init__ importing its own submodules is how packages work; a submodule
    # importing its package's __init__ back would close a circle, and counts.
    assert _cycle(graph) is None


def test_no_import_circle_through_imports_inside_functions():
    # An import inside a function closes a circle as well (what `farm-studio look` draws):
    # `training/distributed.py` picked `JaxDataParallel` in a function while
    # `training/jax_distributed.py` took `Distribution` from it; the base class now sits
    # below both (`training/distribution_base.py`).
    modules = _modules()
    graph = {m: _imports(p, modules, top_level_only=False) - {m} for m, p in modules.items()}
    assert _cycle(graph) is None


def test_the_launcher_module_sits_below_data_training_and_cli():
    # Who launched the process is answered once, by a module that data/ and training/ may
    # both import (utils/) and that imports no other cvbench module.
    modules = _modules()
    launch = "cvbench.utils.launch"
    assert _imports(modules[launch], modules, top_level_only=False) == set()
    users = {m for m, p in modules.items() if launch in _imports(p, modules, top_level_only=False)}
    assert {
        "cvbench.data._distributed",
        "cvbench.training.distributed",
        "cvbench.training.jax_distributed",
        "cvbench.cli.backend_args",
    } <= users


def _named_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """The cvbench modules `path` names in a string (`"cvbench.cli.train"`): what it imports
    through `importlib.import_module`, as `cvbench.cli` its subcommands and a lazy
    `__init__` the home modules of its names. A dotted name only: a bare "cvbench" is a
    Keras serialization package, not an import."""
    tree = ast.parse(path.read_text(), filename=str(path))
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    return {s for s in strings if isinstance(s, str) and "." in s and s in modules}


def _loops_through_init(modules: dict[str, Path]) -> list[str]:
    """`package <- module` for each module that imports its package's `__init__` itself (a
    name defined there, not a submodule), at any level, while that `__init__` imports the
    module (statically, in a function or through importlib, directly or through other modules
    of the package): a circle `test_no_import_circle_between_modules` cannot see."""
    graph = {
        m: _imports(p, modules, top_level_only=False) | _named_modules(p, modules)
        for m, p in modules.items()
    }
    loops = []
    for package, path in modules.items():
        if path.name != "__init__.py":
            continue
        inside = package + "."
        loaded, todo = set(), [t for t in graph[package] if t.startswith(inside)]
        while todo:
            module = todo.pop()
            if module not in loaded:
                loaded.add(module)
                todo.extend(t for t in graph[module] if t.startswith(inside))
        loops += [f"{package} <- {m}" for m in sorted(loaded) if package in graph[m]]
    return loops


def test_no_module_imports_back_the_init_that_imports_it():
    assert _loops_through_init(_modules()) == []


def test_loop_finder_sees_an_importlib_loop(tmp_path):
    # The shape of the old `cvbench.cli`: the __init__ imports its subcommand by name, the
    # subcommand imports a class of the __init__ (in a function: still a loop).
    package = tmp_path / "cvbench" / "cli"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'import importlib\nclass CLIError(Exception): ...\nNAMES = ("cvbench.cli.train",)\n'
    )
    (package / "args.py").write_text("from cvbench.cli import train\n")
    (package / "train.py").write_text("def f():\n    from cvbench.cli import CLIError\n")
    modules = {_module_name(p, root=tmp_path / "cvbench"): p for p in sorted(package.rglob("*.py"))}
    assert _loops_through_init(modules) == ["cvbench.cli <- cvbench.cli.train"]
    (package / "train.py").write_text("def f():\n    from cvbench.cli.args import x\n")
    assert _loops_through_init(modules) == []


def test_no_cli_module_imports_from_cvbench_cli_itself():
    # `cvbench.cli` imports every subcommand module (`_COMMAND_MODULES`, through importlib):
    # what they share lives in its submodules (`cvbench.cli.errors`, `.args`, `.task_args`).
    modules = _modules()
    back = [
        module
        for module, path in modules.items()
        if module.startswith("cvbench.cli.")
        and "cvbench.cli" in _imports(path, modules, top_level_only=False)
    ]
    assert back == []
    assert "cvbench.cli.errors" in modules and len([m for m in modules if "cli." in m]) > 8


def test_parts_import_only_downward():
    modules = _modules()
    parts: dict[str, set[str]] = {}
    for module, path in modules.items():
        for target in _imports(path, modules, top_level_only=False):
            if _part(target) != _part(module):
                parts.setdefault(_part(module), set()).add(_part(target))
    wrong = {p: sorted(t - ALLOWED[p]) for p, t in parts.items() if t - ALLOWED[p]}
    assert wrong == {}
    assert _cycle({p: ALLOWED[p] for p in ALLOWED}) is None


def test_data_never_imports_detection_training_or_tasks():
    # The rule of docs/architecture.md, stated on its own: data is the bottom layer.
    modules = _modules()
    for module, path in modules.items():
        if _part(module) == "data":
            targets = {_part(t) for t in _imports(path, modules, top_level_only=False)}
            assert not targets & {"detection", "training", "tasks", "models", "zoo"}, module


#: The stages inside `cvbench/data` (its subpackages) and the stages each may import; every
#: stage may import the shared modules at the top of `cvbench/data`, which import no stage
#: (docs/architecture.md, "data/ by flow stage").
DATA_STAGES = {
    "acquire": set(),
    "builders": set(),
    "read": set(),
    "dali": {"read"},
    "grain": {"read"},
}


def _data_stage(module: str) -> str | None:
    """`read` for `cvbench.data.read.reader`; None for a shared top module of data (or the
    package itself), and for a module outside data."""
    parts = module.split(".")
    if parts[:2] != ["cvbench", "data"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in DATA_STAGES else None


def _data_stage_imports() -> dict[str, set[str]]:
    """Each data module (a stage module, or `top` for a shared one) -> the stages it imports."""
    modules = _modules()
    found: dict[str, set[str]] = {}
    for module, path in modules.items():
        if _part(module) != "data" or module == "cvbench.data":
            continue
        source = _data_stage(module) or "top"
        targets = _imports(path, modules, top_level_only=False) | _named_modules(path, modules)
        stages = {_data_stage(t) for t in targets if _part(t) == "data"} - {None, source}
        found.setdefault(source, set()).update(stages)
    return found


def test_data_stages_import_only_what_they_may():
    # read and builders never import each other or acquire; acquire imports no stage; dali
    # and grain read through read (its TensorFlow-free spec and recipe); the shared top
    # modules of data import no stage.
    found = _data_stage_imports()
    allowed = {**DATA_STAGES, "top": set()}
    wrong = {s: sorted(t - allowed[s]) for s, t in found.items() if t - allowed[s]}
    assert wrong == {}
    assert set(found) == {"acquire", "builders", "read", "dali", "grain", "top"}
    assert found["dali"] == {"read"}  # the scan sees a stage importing another


def test_data_stage_of_a_module():
    assert _data_stage("cvbench.data.read.reader") == "read"
    assert _data_stage("cvbench.data.dali") == "dali"
    assert _data_stage("cvbench.data.dali_index") is None
    assert _data_stage("cvbench.data") is None
    assert _data_stage("cvbench.tasks.base") is None


def _import_alone(name: str) -> str | None:
    try:
        __import__(name)
    except Exception as e:  # noqa: BLE001 - reported to the parent
        return f"{name}: {type(e).__name__}: {e}"
    return None


def _child(name: str, conn) -> None:
    conn.send(_import_alone(name))
    conn.close()


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_process():
    # One fresh interpreter holding TensorFlow and Keras (slow to import) but no cvbench
    # module; each module is then imported in its own forked copy of it, so no module can
    # rely on another having been imported first. (`__main__` runs the CLI: not imported.)
    script = (
        "import multiprocessing as mp, sys\n"
        "import tensorflow, keras\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_architecture import _child, _modules\n"
        "assert not [m for m in sys.modules if m.startswith('cvbench')]\n"
        "ctx = mp.get_context('fork')\n"
        "failures = []\n"
        "for name in (m for m in _modules() if not m.endswith('__main__')):\n"
        "    parent, child = ctx.Pipe()\n"
        "    p = ctx.Process(target=_child, args=(name, child)); p.start()\n"
        "    result = parent.recv() if parent.poll(120) else f'{name}: no answer'\n"
        "    p.join(30)\n"
        "    if result: failures.append(result)\n"
        "print('FAILURES', failures)\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "FAILURES []"
    assert len(_modules()) > 80  # the loop above really covered the package


#: Parts whose modules may repeat a public name: every `cvbench/cli` subcommand module has
#: `register` (and `handler`), by protocol; `cvbench/data` has one `num_examples` per data set
#: and one `BuildSummary` per builder.
SHARED_NAMES_ALLOWED_IN = ("cvbench/cli/", "cvbench/data/")


def _public_definitions(path: Path) -> set[str]:
    """The public functions and classes `path` defines at its top level."""
    tree = ast.parse(path.read_text(), filename=str(path))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {n.name for n in tree.body if isinstance(n, kinds) and not n.name.startswith("_")}


def _repeated_names(paths: list[Path]) -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for path in paths:
        for name in _public_definitions(path):
            where.setdefault(name, []).append(_module_name(path))
    return {name: sorted(modules) for name, modules in where.items() if len(modules) > 1}


def test_a_public_function_or_class_name_is_defined_once():
    # Two `export_model`s (the Trainer's `model.keras` + SavedModel, and the serving export)
    # read the same at a call site and in the docs; each name says what it does.
    paths = [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if not p.relative_to(PACKAGE.parent).as_posix().startswith(SHARED_NAMES_ALLOWED_IN)
    ]
    assert _repeated_names(paths) == {}
    names = _repeated_names([PACKAGE / "zoo.py", *sorted((PACKAGE / "cli").glob("*.py"))])
    assert "register" in names  # the scan sees a repeated name


# ---------------------------------------------------------------- docs/architecture.md
DOC = PACKAGE.parent / "docs" / "architecture.md"
#: Module paths (under the repository) not required in docs/architecture.md: none.
EXCLUDED_FROM_DOC_CHECK: tuple[str, ...] = ()


def _doc_path(path: Path) -> str:
    """How docs/architecture.md names a module: its path under `cvbench/` (`cli/errors.py`,
    `tasks/recipes/core.py`), a top-level module with the `cvbench/` prefix
    (`cvbench/zoo.py`)."""
    relative = path.relative_to(PACKAGE).as_posix()
    return relative if "/" in relative else f"cvbench/{relative}"


def _unnamed_modules(doc: str, paths: list[Path]) -> list[str]:
    """The paths of `paths` that `doc` does not name as a whole path (`ops.py` is not named
    by `box_ops.py`, nor `cli/args.py` by `cli/task_args.py`); `cvbench/cli/args.py` names
    `cli/args.py` too."""
    unnamed = []
    for path in paths:
        name = _doc_path(path)
        pattern = rf"(?<![\w./])(?:cvbench/)?{re.escape(name.removeprefix('cvbench/'))}(?!\w)"
        if name.startswith("cvbench/"):  # a top-level module: always with the prefix
            pattern = rf"(?<![\w./]){re.escape(name)}(?!\w)"
        if not re.search(pattern, doc):
            unnamed.append(name)
    return unnamed


def _checked_modules() -> list[Path]:
    return [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if not p.relative_to(PACKAGE.parent).as_posix().startswith(EXCLUDED_FROM_DOC_CHECK)
    ]


def test_architecture_doc_names_every_module():
    unnamed = _unnamed_modules(DOC.read_text(encoding="utf-8"), _checked_modules())
    assert unnamed == [], "name each in docs/architecture.md, '## Every module'"
    assert len(_checked_modules()) > 80  # the scan really covered the package


def test_every_module_the_doc_lists_exists():
    # The list of '## Every module' names no module that was moved or removed.
    section = DOC.read_text(encoding="utf-8").split("## Every module", 1)[1].split("\n## ")[0]
    heads = [line.split(":", 1)[0] for line in section.splitlines() if line.startswith("- ")]
    listed = re.findall(r"`((?:cvbench/)?[\w/]+\.py)`", "\n".join(heads))
    assert len(listed) > 80
    missing = [p for p in listed if not (PACKAGE / p.removeprefix("cvbench/")).is_file()]
    assert missing == []


def test_the_doc_check_matches_whole_paths_only():
    paths = [PACKAGE / "cli" / "args.py", PACKAGE / "detection" / "box_ops.py", PACKAGE / "zoo.py"]
    assert _unnamed_modules("`cli/task_args.py`, `box_ops.py`, zoo.py", paths) == [
        "cli/args.py",
        "detection/box_ops.py",
        "cvbench/zoo.py",
    ]
    assert _unnamed_modules("`cli/args.py`; detection/box_ops.py, `cvbench/zoo.py`", paths) == []
    assert _unnamed_modules("`cvbench/cli/args.py` `cvbench/detection/box_ops.py`", paths) == [
        "cvbench/zoo.py"
    ]
