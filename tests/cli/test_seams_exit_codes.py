"""Exit 2 is for usage errors, exit 1 for failures at run time: the command never turns one
of cvbench's run-time errors into a usage error (`CLIError`).

Before: `download-coco` caught `DownloadError` (a run-time failure, exit 1 by its class) and
raised `CLIError(str(e))`, exit 2; `predict` / `export`'s `with_flag_hints` turned every
`ValueError` but `BadFileError` into one; `export` turned every `RuntimeError` into one.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil

import pytest

import cvbench.cli
from cvbench.cli.errors import CLIError, known_error
from cvbench.cli.predict import with_flag_hints
from cvbench.utils.errors import RUN_ERROR, USAGE_ERROR, CvbenchError


def _imported_names(tree: ast.AST, module: str) -> dict[str, object]:
    """Name -> object for every `from X import Name` anywhere in the module (handlers
    import their errors locally)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                try:
                    names[alias.asname or alias.name] = getattr(
                        importlib.import_module(node.module), alias.name
                    )
                except (ImportError, AttributeError):
                    continue  # an optional package (DALI, grain): not an error class of ours
    return names


def _caught(handler: ast.ExceptHandler) -> list[str]:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return [k.id for k in kinds if isinstance(k, ast.Name)]


def _raises_cli_error(handler: ast.ExceptHandler) -> bool:
    for node in ast.walk(handler):
        call = node.exc if isinstance(node, ast.Raise) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "CLIError":
            return True
    return False


def test_no_command_turns_a_run_time_error_into_a_usage_error():
    found = []
    for info in pkgutil.iter_modules(cvbench.cli.__path__):
        module = f"cvbench.cli.{info.name}"
        path = importlib.util.find_spec(module).origin
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        names = _imported_names(tree, module)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ExceptHandler) or not _raises_cli_error(node):
                continue
            for name in _caught(node):
                kind = names.get(name) or getattr(__builtins__, name, None)
                ours = isinstance(kind, type) and issubclass(kind, CvbenchError)
                if ours and kind.exit_code == RUN_ERROR:
                    found.append(f"{module}:{node.lineno} except {name}")
    assert found == []


class _RunTimeValueError(CvbenchError, ValueError):
    """A run-time failure that Python callers may catch as a ValueError."""


def test_flag_hints_keep_the_class_and_exit_code_of_cvbenchs_errors():
    error = with_flag_hints(_RunTimeValueError("x.keras: pass overwrite=True to replace it"))
    assert (
        type(error) is _RunTimeValueError
        and str(error) == "x.keras: pass --overwrite to replace it"
    )
    assert known_error(error, command="export") == (
        "cvbench export: error: x.keras: pass --overwrite to replace it",
        RUN_ERROR,
    )
    plain = with_flag_hints(ValueError("top_k must be >= 1"))
    assert type(plain) is CLIError and plain.exit_code == USAGE_ERROR


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_export_under_another_backend_is_a_usage_error_told_before_any_work(monkeypatch, backend):
    import keras

    from cvbench.cli import export

    monkeypatch.setattr(keras.config, "backend", lambda: backend)
    with pytest.raises(
        CLIError, match=rf"export needs the TensorFlow backend \(KERAS_BACKEND={backend}\)"
    ):
        export._check_backend()
    monkeypatch.setattr(keras.config, "backend", lambda: "tensorflow")
    export._check_backend()  # no error
