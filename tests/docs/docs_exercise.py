"""Exercises one documentation block as its directive says (see docs_blocks.py for the grammar).

Paths: every `/data/...` and `/downloads/...` path of a block is moved under the block's own
temporary folder. Where the block names one of the data sets in `DATA_SETS`, that path holds
the tiny test version (a symlink to a session-wide copy), unless the directive lists it with
`out=` (the block writes it: it starts absent). The repository's `benchmarks/`, `examples/`,
`scripts/`, `Makefile`, `Dockerfile` and `pyproject.toml` are linked into the folder, so
relative paths in the docs work.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from docs_blocks import Block
from docs_commands import ROOT, CommandError, run_command, split_commands
from docs_parsers import check_synopsis, parse_command

# Doc path -> name of the tiny data set that stands in for it (see docs_tiny_data.py).
DATA_SETS = {
    "/data/imagenet-raw": "imagenet_raw",
    "/data/imagenet-tfrecords": "imagenet_records",
    "/data/imagenet_tfrecord": "imagenet_records",
    "/data/coco": "coco_raw",
    "/data/coco-tfrecords": "coco_records",
    "/downloads": "imagenet_archives",
}
# File name (relative to the block's folder) -> the tiny file that stands in for it.
DATA_FILES = {"resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5": "resnet50_notop_h5"}
_ROOTS = re.compile(r"(?<![\w./-])/(?:data|downloads)(?![\w-])")
_LINKED = ("benchmarks", "examples", "scripts", "Makefile", "Dockerfile", "pyproject.toml")
# Output of each command an `output` block ran, by command line: blocks showing parts of
# the same output share one run.
_OUTPUTS: dict[str, str] = {}
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass
class Workspace:
    """A block's folder, and the Python namespace a `continue` block carries on in."""

    path: Path
    namespace: dict = field(default_factory=dict)


def prepare(block: Block, text: str, folder: Path, data: Callable[[str], Path]) -> str:
    """Makes `folder` the block's workspace; returns `text` with its paths moved under it."""
    for name in _LINKED:
        link = folder / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    outs = {_ROOTS.sub(lambda m: str(folder) + m[0], o) for o in block.directive.outs}
    for doc_path, name in DATA_SETS.items():
        local = Path(str(folder) + doc_path)
        named = re.search(re.escape(doc_path) + r"(?![\w-])", text)
        if named and str(local) not in outs and not local.exists():
            local.parent.mkdir(parents=True, exist_ok=True)
            local.symlink_to(data(name))
    for file_name, name in DATA_FILES.items():
        if file_name in text and not (folder / file_name).exists():
            (folder / file_name).symlink_to(data(name))
    (folder / "data").mkdir(exist_ok=True)
    return _ROOTS.sub(lambda m: str(folder) + m[0], text)


def run_python(code: str, workspace: Workspace, filename: str) -> None:
    """Executes `code` in `workspace.namespace`, in its folder."""
    previous = Path.cwd()
    os.chdir(workspace.path)
    try:
        exec(compile(code, filename, "exec"), workspace.namespace)
    finally:
        os.chdir(previous)


def parse_python(code: str, filename: str) -> None:
    """Compiles `code` and checks that every name it imports exists."""
    tree = ast.parse(code, filename)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):
                    with contextlib.suppress(ImportError):
                        importlib.import_module(f"{node.module}.{alias.name}")
                    if not hasattr(module, alias.name):
                        raise ImportError(f"{filename}: {node.module} has no {alias.name}")


def mask(line: str) -> str:
    """A line with every number replaced by `#` and runs of spaces collapsed."""
    return " ".join(_NUMBER.sub("#", line).split())


def check_output(shown: list[str], actual: str) -> None:
    """Every shown line (numbers masked) must be a line of `actual`, in the same order."""
    lines = [mask(x) for x in actual.splitlines()]
    position = 0
    for line in shown:
        if not line.strip():
            continue
        want = mask(line)
        try:
            position = lines.index(want, position) + 1
        except ValueError:
            raise AssertionError(
                f"shown line {line!r} (masked {want!r}) is not in the real output "
                f"(after line {position}):\n" + "\n".join(lines)
            ) from None


def check_layout(tree: str, root: Path) -> None:
    """Every path of an indented folder tree must exist under `root`.

    The first line names the root; each other line's first word is a path relative to the
    nearest less-indented folder line above it (words ending in `/` are folders). `<name>`
    matches any one path component and a trailing `...` is ignored.
    """
    stack: list[tuple[int, str]] = []
    for line in tree.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        word = line.split()[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        relative = "/".join([p for _, p in stack] + [word.rstrip("/")])
        pattern = re.sub(r"<[^>]+>", "*", relative)
        if not list(root.glob(pattern)):
            found = sorted(str(p.relative_to(root)) for p in root.rglob("*"))[:40]
            raise AssertionError(f"{pattern!r} does not exist under {root}; found {found}")
        if word.endswith("/"):
            stack.append((indent, word.rstrip("/")))


# A module path in a figure: `data/reader`, `tasks/`, `zoo.py`, `training/Trainer` (a name
# after the slash that is a class or function, not a module, is cut at the slash).
_FIGURE_PATH = re.compile(r"(?<![\w./-])([a-z_]+/(?:[a-z_]+(?:\.py)?)?|[a-z_]+\.py)(?![a-z_/-])")


def check_figure(text: str, package: Path) -> None:
    """Every module path named in a text figure must exist in `package` (as a folder, a
    `.py` file, or a folder holding the named module)."""
    named = _FIGURE_PATH.findall(text)
    if not named:
        raise AssertionError("the figure names no module path (`data/reader`, `zoo.py`)")
    for path in named:
        stem = path.rstrip("/").removesuffix(".py")
        if not ((package / stem).is_dir() or (package / f"{stem}.py").is_file()):
            raise AssertionError(f"the figure names {path!r}, which is not in {package}")


def exercise(
    block: Block, workspace: Workspace, data: Callable[[str], Path], built_tags: set[str]
) -> None:
    """Runs or checks `block` as its directive says; raises AssertionError (or the error of
    the failing code) when it does not work."""
    directive = block.directive
    filename = f"{block.path.name}:{block.line}"
    python = block.lang == "python"
    if directive.mode in ("run", "parse"):
        text = prepare(block, block.substituted(), workspace.path, data)
    if directive.mode == "run" and python:
        run_python(text, workspace, filename)
    elif directive.mode == "parse" and python:
        parse_python(text, filename)
    elif directive.mode in ("run", "parse"):
        commands = split_commands(text)
        if not commands:
            raise CommandError(f"{filename}: no command in the block")
        for cmd in commands:
            if directive.mode == "run":
                _OUTPUTS[str(cmd)] = run_command(cmd, workspace.path)
            else:
                parse_command(cmd, commands, built_tags)
    elif directive.mode == "output":
        shown = [x for x in block.text.splitlines() if not x.startswith("$ ")]
        source = directive.cmd or "\n".join(x for x in block.text.splitlines() if x[:2] == "$ ")
        block.substituted(source + "\n" + block.text)  # every sub must match somewhere
        source = prepare(block, block.substituted(source, strict=False), workspace.path, data)
        output = ""
        for cmd in split_commands(source):
            if str(cmd) not in _OUTPUTS:
                _OUTPUTS[str(cmd)] = run_command(cmd, workspace.path)
            output += _OUTPUTS[str(cmd)]
        check_output(block.substituted("\n".join(shown), strict=False).splitlines(), output)
    elif directive.mode == "layout":
        block.substituted(directive.cmd + "\n" + block.text)  # every sub must match somewhere
        if directive.cmd:
            cmd_text = block.substituted(directive.cmd, strict=False)
            for cmd in split_commands(prepare(block, cmd_text, workspace.path, data)):
                run_command(cmd, workspace.path)
        root = Path(prepare(block, directive.root, workspace.path, data))
        check_layout(block.substituted(strict=False), root)
    elif directive.mode == "synopsis":
        check_synopsis(block.text)
    elif directive.mode == "figure":
        check_figure(block.text, ROOT / "cvbench")
    else:  # pragma: no cover - Directive.parse refuses other modes
        raise AssertionError(f"{filename}: mode {directive.mode!r}")
