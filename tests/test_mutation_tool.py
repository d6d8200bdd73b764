"""scripts/mutation.py (the mutation-testing command): its operators, its equivalent lists.

The runner itself is too slow for the suite (docs/testing.md); these check what it would
mutate and that every mutant kept as equivalent still exists, with a reason.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import mutation  # noqa: E402
from mutation_ops import compile_mutant, find_mutants, mutated_source, mutated_tree  # noqa: E402

SOURCE = '''"""Docstring: 1 < 2 is not mutated."""
LIMIT = 3


def clip(x, low=0):
    """Doc."""
    if x < low:
        raise ValueError(f"x={x} < {low}")
    return min(x + 1, LIMIT) if not x else -x
'''


def test_operators_on_a_tiny_module():
    changes = [(m.id, m.line, m.change) for m in find_mutants(SOURCE, "t")]
    # The docstrings, the raise (its f-string) and the annotations are left alone; `not x`
    # in the conditional is the `unary` mutant only (its `not` negation would be the same).
    assert changes == [
        ("t:<module>:const:0", 2, "3 -> 4"),
        ("t:clip:const:0", 5, "0 -> 1"),
        ("t:clip:not:0", 7, "x < low -> not x < low"),
        ("t:clip:cmp:0", 7, "x < low -> x <= low"),
        ("t:clip:return:0", 9, "return min(x + 1, LIMIT) if not x else -x -> return None"),
        ("t:clip:unary:0", 9, "not x -> bool(x)"),
        ("t:clip:minmax:0", 9, "min(x + 1, LIMIT) -> max(x + 1, LIMIT)"),
        ("t:clip:binop:0", 9, "x + 1 -> x - 1"),
        ("t:clip:const:1", 9, "1 -> 2"),
        ("t:clip:unary:1", 9, "-x -> +x"),
    ]


@pytest.mark.parametrize(
    ("mutant_id", "x", "expected"),
    [
        ("t:clip:binop:0", 0, -1),  # min(0 - 1, 3)
        ("t:clip:minmax:0", 0, 3),  # max(0 + 1, 3)
        ("t:clip:unary:0", 0, 0),  # bool(0) is False: -0
        ("t:clip:unary:1", 5, 5),  # +5 instead of -5
        ("t:<module>:const:0", 0, 1),  # min(1, 4)
    ],
)
def test_compiled_mutant_behaves_as_described(mutant_id, x, expected):
    mutant = next(m for m in find_mutants(SOURCE, "t") if m.id == mutant_id)
    namespace: dict = {}
    exec(compile_mutant(SOURCE, mutant, "t.py"), namespace)
    assert namespace["clip"](x) == expected


def test_sampling_is_seeded_and_in_source_order():
    mutants = find_mutants(SOURCE, "t")
    a = mutation.sample_mutants(mutants, 4, seed=0)
    assert a == mutation.sample_mutants(mutants, 4, seed=0)
    assert [m.index for m in a] == sorted(m.index for m in a)
    assert mutation.sample_mutants(mutants, 99, seed=0) == mutants


def test_equivalent_file_format(tmp_path):
    (tmp_path / "a.txt").write_text("# comment\n\nm:f:cmp:0  # same for every input\n")
    assert mutation.read_equivalent(tmp_path) == {"m:f:cmp:0": "same for every input"}
    (tmp_path / "b.txt").write_text("m:f:cmp:1\n")
    with pytest.raises(ValueError, match=r"b.txt:1: expected 'ID  # reason'"):
        mutation.read_equivalent(tmp_path)
    (tmp_path / "b.txt").write_text("m:f:cmp:0  # again\n")
    with pytest.raises(ValueError, match="listed twice"):
        mutation.read_equivalent(tmp_path)


def test_every_equivalent_mutant_exists():
    # A mutant kept as equivalent must still be a mutant of its module (an edit that moves or
    # removes the code makes the entry stale), and belong to a module the command tests.
    known = {}
    for module in mutation.TARGETS:
        path = ROOT / "cvbench" / (module.replace(".", "/") + ".py")
        known.update({m.id: m for m in find_mutants(path.read_text(), module)})
    stale = [i for i in mutation.read_equivalent() if i not in known]
    assert not stale, f"equivalent mutants that no longer exist: {stale}"


def test_targets_exist():
    for module, tests in mutation.TARGETS.items():
        assert (ROOT / "cvbench" / (module.replace(".", "/") + ".py")).is_file(), module
        for test in tests:
            assert (ROOT / test).is_file(), test


def test_mutated_source_keeps_every_line_in_place():
    # AutoGraph re-reads a function's source lines to convert it (tf.data maps), so the child
    # serves this text through linecache: each mutant's text must parse to the mutated tree
    # with the same number of lines.
    by_id = {m.id: m for m in find_mutants(SOURCE, "t")}
    text = mutated_source(SOURCE, by_id["t:clip:binop:0"])
    assert text.splitlines()[8] == "    return min((x - 1), LIMIT) if not x else -x"
    assert mutated_source(SOURCE, by_id["t:clip:return:0"]).splitlines()[8] == "    return None"
    for m in by_id.values():
        text = mutated_source(SOURCE, m)
        assert len(text.splitlines()) == len(SOURCE.splitlines()), m.id
        assert ast.dump(ast.parse(text)) == ast.dump(mutated_tree(SOURCE, m)), m.id


def test_a_multiline_expression_keeps_its_lines():
    source = "def f(a, b):\n    return (a +\n            b) * 2\n"
    (m,) = [m for m in find_mutants(source, "t") if m.id == "t:f:binop:1"]  # the inner +
    assert mutated_source(source, m).splitlines() == [
        "def f(a, b):",
        "    return ((a - b",
        ")) * 2",
    ]
