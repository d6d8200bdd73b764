"""Counts of the package's heavy spots, for the before/after of a redesign step.

    python scripts/house_counts.py [--list]

Prints, for `cvbench/`: functions over 60 lines, signatures over 10 parameters,
`if` branches that test a task kind ("classification" / "detection" compared with a
name), and the places that spell a run-folder name in a string literal.
"""

from __future__ import annotations

import argparse
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "cvbench"
TASK_KINDS = {"classification", "detection", "classify", "detect"}
RUN_FOLDER_NAMES = {
    "checkpoints",
    "train_log.jsonl",
    "export",
    "tensorboard",
    "results.json",
}


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = a.posonlyargs + a.args + a.kwonlyargs
    names = [n for n in names if n.arg not in ("self", "cls")]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def _is_task_kind_test(test: ast.expr) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                if isinstance(side, ast.Constant) and side.value in TASK_KINDS:
                    return True
    return False


def count(root: pathlib.Path = ROOT) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {
        "functions over 60 lines": [],
        "signatures over 10 parameters": [],
        "if on a task kind": [],
        "run-folder names spelled": [],
    }
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    found["functions over 60 lines"].append(
                        f"{rel}:{node.lineno} {node.name} {length}"
                    )
                if _params(node) > 10:
                    found["signatures over 10 parameters"].append(
                        f"{rel}:{node.lineno} {node.name} {_params(node)}"
                    )
            elif isinstance(node, (ast.If, ast.IfExp)) and _is_task_kind_test(node.test):
                found["if on a task kind"].append(f"{rel}:{node.lineno}")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in RUN_FOLDER_NAMES
            ):
                found["run-folder names spelled"].append(f"{rel}:{node.lineno} {node.value}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list every place")
    args = parser.parse_args()
    for name, places in count().items():
        print(f"{name}: {len(places)}")
        if args.list:
            for place in places:
                print(f"  {place}")


if __name__ == "__main__":
    main()
