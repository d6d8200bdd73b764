"""docs/api.md is what scripts/api_docs.py generates from the docstrings right now."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import pytest
from docs_commands import ROOT


def _api_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_docs", ROOT / "scripts" / "api_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


api_docs = _api_docs()
_SENTINEL = object()


def test_api_reference_is_up_to_date():
    committed = (ROOT / "docs" / "api.md").read_text()
    rendered = api_docs.render()
    if rendered != committed:
        import difflib

        diff = difflib.unified_diff(
            committed.splitlines(), rendered.splitlines(), "docs/api.md", "rendered", lineterm=""
        )
        pytest.fail(
            "docs/api.md is out of date with the docstrings: regenerate it with "
            f"`{api_docs.COMMAND}` (from the repository root, in the venv) and commit it\n"
            + "\n".join(list(diff)[:40])
        )


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "api.md"
    stale.write_text("# API reference\n")
    assert api_docs.main(["--check", "--output", str(stale)]) == 1
    assert api_docs.COMMAND in capsys.readouterr().err


def _documented(x: int, *, scale: float = 2.0) -> float:
    """Scales x.

    Args:
        x: the value.
    """
    return x * scale


class _Base:
    def hook(self) -> None:
        """The base class documents its hooks."""


class _Thing(_Base):
    """A thing."""

    def __init__(self, size: int) -> None:
        self.size = size

    def hook(self) -> None:  # an undocumented override: left out
        pass

    def grow(self, by: int = 1) -> int:
        """Grows the thing."""
        return self.size + by

    @property
    def area(self) -> int:
        """Its area."""
        return self.size**2


def test_render_object_shows_signatures_docstrings_and_public_members():
    text = api_docs.render_object("pkg", "documented", _documented)
    assert "### `pkg.documented`" in text
    assert "documented(x: int, *, scale: float = 2.0) -> float" in text  # annotations unquoted
    assert "Scales x.\n\n**Args:**\n\n- `x`: the value." in text  # Google sections as Markdown
    text = api_docs.render_object("pkg", "Thing", _Thing)
    assert "class Thing(size: int) -> None" in text and "A thing." in text
    assert "grow(self, by: int = 1) -> int" in text and "Grows the thing." in text
    assert "property area" in text and "Its area." in text
    assert "hook" not in text
    assert api_docs.render_object("pkg", "N", 3) == "### `pkg.N`\n\n```\nN = 3\n```\n"


def test_every_documented_package_has_all():
    for name in api_docs.PACKAGES:
        assert importlib.import_module(name).__all__


def test_google_docstrings_become_markdown():
    doc = (
        "Summary.\n\nArgs:\n    boxes: `(N, 4)` boxes,\n        normalized.\n"
        "    num_classes (int): classes.\n\nReturns:\n    The codes.\n\n"
        "Example:\n    >>> f(1)\n    2\n\nMore prose."
    )
    assert api_docs._markdown(doc) == (
        "Summary.\n\n**Args:**\n\n- `boxes`: `(N, 4)` boxes,\n  normalized.\n"
        "- `num_classes (int)`: classes.\n\n**Returns:**\n\n- The codes.\n\n"
        "**Example:**\n\n```python\n>>> f(1)\n2\n```\n\nMore prose."
    )


def test_signatures_do_not_depend_on_where_things_are_installed():
    # Regression: a module default (`xp=keras.ops`) was shown with its file path, so the
    # reference generated in a fresh clone's venv differed from the committed one.
    import keras

    def f(x, *, xp=keras.ops, fn=len, obj=_SENTINEL):
        return x

    text = api_docs._signature(f)
    assert "xp=keras.ops" in text
    assert "site-packages" not in text and " at 0x" not in text
