"""Writes docs/api.md, the API reference, from the docstrings of cvbench's public names.

The public names are each package's `__all__` (see `PACKAGES`). For each name: its signature
and docstring; for a class also its public methods and properties; for a constant its value.
Nothing is written by hand, so the reference follows the code; a test regenerates it and
compares (tests/docs/test_api_docs.py).

    python scripts/api_docs.py            # rewrite docs/api.md
    python scripts/api_docs.py --check    # exit 1 if docs/api.md is out of date
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api.md"
PACKAGES = (
    "cvbench",
    "cvbench.zoo",
    "cvbench.models",
    "cvbench.data",
    "cvbench.detection",
    "cvbench.tasks",
    "cvbench.training",
    "cvbench.benchmark",
)
COMMAND = "python scripts/api_docs.py"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # reprs of default objects differ per run
# A module as a default value reprs with its file path, which differs per installation.
_MODULE = re.compile(r"<module '([\w.]+)'(?: from '[^']*')?>")
# Annotations are strings under `from __future__ import annotations`: show them unquoted.
_QUOTED_ANNOTATION = re.compile(r"(: |-> )'([^']*)'")
_MAX_VALUE = 300


def _signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    text = _MODULE.sub(r"\1", _ADDRESS.sub("", text))
    return _QUOTED_ANNOTATION.sub(r"\1\2", text)


_SECTION = re.compile(
    r"^(Args|Arguments|Attributes|Returns|Yields|Raises|Example|Examples|Note|Notes|Usage):$"
)
_ENTRY = re.compile(r"^(\*{0,2}[\w.]+(?: \([^)]*\))?):\s*(.*)$")


def _doc(obj: object) -> str:
    """The docstring as Markdown: Google-style sections become bold headings, their entries
    list items, and doctest examples Python code."""
    return _markdown(inspect.getdoc(obj) or "(no docstring)")


def _markdown(doc: str) -> str:
    out: list[str] = []
    section = None
    in_code = False
    for line in doc.strip().splitlines():
        stripped = line.strip()
        if in_code and not (stripped.startswith((">>>", "...")) or (stripped and section)):
            out.append("```")
            in_code = False
        match = _SECTION.match(line)
        if match:
            section = match[1]
            out += ["", f"**{section}:**", ""]
            continue
        if section and line and not line.startswith(" "):
            section = None  # back to prose
            out.append("")
        if stripped.startswith(">>>") and not in_code:
            out.append("```python")
            in_code = True
        if in_code:
            out.append(line[4:] if line.startswith("    ") else line)
            continue
        entry = _ENTRY.match(line[4:]) if section and line.startswith("    ") else None
        if entry and not line.startswith("     "):
            out.append(f"- `{entry[1]}`: {entry[2]}")
        elif section and line.startswith("    "):
            out.append(("- " if not out or not out[-1] else "  ") + line.strip())
        else:
            out.append(line)
    if in_code:
        out.append("```")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _anchor(package: str, name: str) -> str:
    """GitHub's anchor of the heading `package.name`: lower case, punctuation but - and _
    removed."""
    return re.sub(r"[^\w\- ]", "", f"{package}.{name}".lower()).replace(" ", "-")


def _members(cls: type) -> list[tuple[str, object]]:
    """Public methods and properties defined by `cls` itself, in source order, then those of
    its private cvbench base classes (a leading underscore: parts of `cls` kept in another
    module, such as the Trainer's checkpoints). Overrides of a base class's method (Keras'
    `call`, `build`, `get_config`) are left out unless they have a docstring of their own."""
    mro = cls.__mro__
    owners = [cls] + [
        base
        for base in mro[1:]
        if base.__name__.startswith("_") and base.__module__.startswith("cvbench.")
    ]
    out, seen = [], set()
    for owner in owners:
        for name, member in vars(owner).items():
            if name.startswith("_") or name in seen:
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if not (inspect.isfunction(member) or isinstance(member, property)):
                continue
            overrides = any(hasattr(base, name) for base in mro[mro.index(owner) + 1 :])
            if overrides and not member.__doc__:
                continue
            seen.add(name)
            out.append((name, member))
    return out


def _code(text: str) -> str:
    return f"```\n{text}\n```"


def render_object(package: str, name: str, obj: object) -> str:
    """The Markdown section of one public name."""
    title = f"### `{package}.{name}`"
    if inspect.ismodule(obj):
        summary = _doc(obj).split("\n\n")[0]
        return f"{title}\n\nModule `{obj.__name__}`: {summary}\n"
    if inspect.isclass(obj):
        parts = [title, _code(f"class {name}{_signature(obj)}"), _doc(obj)]
        for member_name, member in _members(obj):
            if isinstance(member, property):
                head = f"property {member_name}"
                doc = _doc(member)
            else:
                head = f"{member_name}{_signature(member)}"
                doc = _doc(member)
            parts.append(f"#### `{name}.{member_name}`\n\n{_code(head)}\n\n{doc}")
        return "\n\n".join(parts) + "\n"
    if callable(obj):
        return "\n\n".join([title, _code(f"{name}{_signature(obj)}"), _doc(obj)]) + "\n"
    value = _ADDRESS.sub("", repr(obj))
    if len(value) > _MAX_VALUE:
        value = value[:_MAX_VALUE] + " ..."
    return f"{title}\n\n{_code(f'{name} = {value}')}\n"


def render_package(module: ModuleType) -> str:
    """The Markdown section of one package: its summary, then each name of its `__all__`."""
    names = getattr(module, "__all__", None)
    if not names:
        raise ValueError(f"{module.__name__} has no __all__ to document")
    summary = _doc(module).split("\n\n")[0]
    parts = [f"## `{module.__name__}`\n\n{summary}\n"]
    parts += [render_object(module.__name__, n, getattr(module, n)) for n in names]
    return "\n".join(parts)


def render(packages: Sequence[str] = PACKAGES) -> str:
    """The whole reference, for the packages named."""
    modules = [importlib.import_module(p) for p in packages]
    index = []
    for module in modules:
        links = ", ".join(f"[`{n}`](#{_anchor(module.__name__, n)})" for n in module.__all__)
        index.append(f"- `{module.__name__}`: {links}")
    head = (
        "# API reference\n\n"
        f"<!-- Generated by `{COMMAND}` from the docstrings; do not edit by hand. -->\n\n"
        "The public names of each package (its `__all__`), with their signatures and\n"
        f"docstrings. Generated from the code by `{COMMAND}`; a test checks that this file\n"
        "is up to date.\n\n" + "\n".join(index) + "\n"
    )
    body = "\n".join(render_package(m) for m in modules)
    return (head + "\n" + body).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="default docs/api.md")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
