"""The mutation operators of `scripts/mutation.py`: where a module can be changed, and how.

A mutant is one change at one place of the module's syntax tree:

* `cmp`: a flipped comparison (`<` <-> `<=`, `>` <-> `>=`, `==` <-> `!=`, `is` <-> `is not`,
  `in` <-> `not in`);
* `binop` / `augop`: a swapped arithmetic operator (`+` <-> `-`, `*` <-> `/`, `//` -> `*`,
  `%` -> `//`, `**` -> `*`, `&` <-> `|`, `<<` <-> `>>`), in an expression or an augmented
  assignment;
* `const`: a number `n` -> `n + 1`; `bool`: `True` <-> `False`;
* `minmax`: `min` <-> `max` (also `minimum`/`maximum`, `argmin`/`argmax`, `reduce_min`/
  `reduce_max`, `amin`/`amax` as attributes: `ops.minimum`, `np.argmax`...);
* `not`: a negated condition (`if`, `while`, `assert`, a conditional expression; `not c` -> `c`);
* `boolop`: `and` <-> `or`; `unary`: `-x` -> `x`;
* `return`: `return value` -> `return None`.

Left alone: docstrings, strings and f-strings, annotations, decorators, `raise` statements
(their messages), `__all__`, `if TYPE_CHECKING:` blocks.

A mutant's id is `module:qualname:kind:k`, the `k`-th place of that kind in that function
(`detection.matcher:match:cmp:2`), which stays the same when other functions change.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BINOP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
_MINMAX = {
    "min": "max",
    "max": "min",
    "minimum": "maximum",
    "maximum": "minimum",
    "argmin": "argmax",
    "argmax": "argmin",
    "reduce_min": "reduce_max",
    "reduce_max": "reduce_min",
    "amin": "amax",
    "amax": "amin",
}


@dataclass(frozen=True)
class Mutant:
    """One change: `id` (stable), its place among all candidates, line and a description."""

    id: str
    index: int
    line: int
    change: str


@dataclass
class _Candidate:
    qualname: str
    kind: str
    node: ast.AST  # the node whose fields `apply` changes
    shown: Callable[[ast.AST], ast.AST]  # node -> the expression to display
    apply: Callable[[ast.AST], None]


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _set(field: str, value_of: Callable[[ast.AST], ast.AST]) -> Callable[[ast.AST], None]:
    def apply(node: ast.AST) -> None:
        setattr(node, field, value_of(node))

    return apply


def _negate(test: ast.expr) -> ast.expr:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.copy_location(ast.UnaryOp(op=ast.Not(), operand=test), test)


def _negation_is_elsewhere(test: ast.expr) -> bool:
    """`not c` is already the `unary` mutant of `c`; `not a is b` the `cmp` one of `a is b`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    inverse = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], inverse)


def _swap_name(n: ast.Call) -> None:
    if isinstance(n.func, ast.Name):
        n.func.id = _MINMAX[n.func.id]
    else:
        n.func.attr = _MINMAX[n.func.attr]


def _flip_op(table: dict) -> Callable[[ast.AST], None]:
    return _set("op", lambda n: table[type(n.op)]())


def _same(n: ast.AST) -> ast.AST:
    return n


def _is_minmax_call(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in ("min", "max")
    return isinstance(func, ast.Attribute) and func.attr in _MINMAX


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _candidates_at(node: ast.AST, qual: str) -> Iterator[_Candidate]:
    def make(kind: str, apply: Callable[[ast.AST], None], shown=_same) -> _Candidate:
        return _Candidate(qual, kind, node, shown, apply)

    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _CMP:

                def apply(n, i=i):
                    n.ops[i] = _CMP[type(n.ops[i])]()

                yield make("cmp", apply)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
        if not (isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
            yield make("binop", _flip_op(_BINOP))
    elif isinstance(node, ast.AugAssign) and type(node.op) in _BINOP:
        yield make("augop", _flip_op(_BINOP))
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield make("bool", _set("value", lambda n: not n.value))
    elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        yield make("const", _set("value", lambda n: n.value + 1))
    elif isinstance(node, ast.Call) and _is_minmax_call(node):
        yield make("minmax", _swap_name)
    elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        if not _negation_is_elsewhere(node.test):
            yield make("not", _set("test", lambda n: _negate(n.test)), shown=lambda n: n.test)
    elif isinstance(node, ast.BoolOp):
        yield make("boolop", _flip_op({ast.And: ast.Or, ast.Or: ast.And}))
    elif isinstance(node, ast.UnaryOp) and (
        isinstance(node.op, ast.Not)
        or (isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant))
    ):
        yield make("unary", _unwrap_unary)
    elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
        yield make("return", _set("value", lambda n: ast.Constant(None)))


def _unwrap_unary(node: ast.UnaryOp) -> None:
    # `-x` -> `x` / `not x` -> `x`: turn the UnaryOp into a no-op unary plus.
    node.op = ast.UAdd() if isinstance(node.op, ast.USub) else _Truthy()


class _Truthy(ast.UAdd):
    """Marks `not x` -> `x` (compiled as `bool(x)`, see `_BoolOfNot`)."""


class _BoolOfNot(ast.NodeTransformer):
    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, _Truthy):
            call = ast.Call(func=ast.Name("bool", ast.Load()), args=[node.operand], keywords=[])
            return ast.copy_location(call, node)
        return node


def _skip_fields(node: ast.AST) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {"decorator_list", "returns", "type_params"}
    if isinstance(node, ast.ClassDef):
        return {"decorator_list", "bases", "keywords", "type_params"}
    if isinstance(node, ast.AnnAssign):
        return {"annotation", "target"}
    return set()


def _skip_node(node: ast.AST) -> bool:
    if isinstance(node, (ast.JoinedStr, ast.Raise, ast.arg, ast.Import, ast.ImportFrom)):
        return True
    if _is_docstring(node):
        return True
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
    ):
        return True
    return isinstance(node, ast.If) and (
        isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, qual: list[str]) -> Iterator[_Candidate]:
    if _skip_node(node):
        return
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        qual = [*qual, node.name]
    yield from _candidates_at(node, ".".join(qual) or "<module>")
    skipped = _skip_fields(node)
    for name, value in ast.iter_fields(node):
        if name in skipped:
            continue
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, ast.AST):
                yield from _walk(child, qual)


def _candidates(tree: ast.Module) -> list[_Candidate]:
    return list(_walk(tree, []))


def _describe(c: _Candidate) -> str:
    before = c.shown(c.node)
    mutated = copy.deepcopy(c.node)
    c.apply(mutated)
    after = _BoolOfNot().visit(copy.deepcopy(c.shown(mutated)))
    text = f"{ast.unparse(before)} -> {ast.unparse(after)}"
    return text if len(text) <= 100 else text[:97] + "..."


def find_mutants(source: str, module: str) -> list[Mutant]:
    """Every mutant of `source` (a module's text), in source order."""
    tree = ast.parse(source)
    seen: dict[tuple[str, str], int] = {}
    mutants = []
    for index, c in enumerate(_candidates(tree)):
        k = seen.get((c.qualname, c.kind), 0)
        seen[(c.qualname, c.kind)] = k + 1
        line = getattr(c.shown(c.node), "lineno", getattr(c.node, "lineno", 0))
        mutant_id = f"{module}:{c.qualname}:{c.kind}:{k}"
        mutants.append(Mutant(mutant_id, index, line, _describe(c)))
    return mutants


def mutated_tree(source: str, mutant: Mutant) -> ast.Module:
    """The syntax tree of `source` with `mutant` applied."""
    tree = ast.parse(source)
    candidates = _candidates(tree)
    c = candidates[mutant.index]
    c.apply(c.node)
    tree = _BoolOfNot().visit(tree)
    return ast.fix_missing_locations(tree)


def _replace(lines: list[str], node: ast.AST, text: str, statement: bool) -> list[str]:
    """`lines` with `node`'s span replaced by `text`, the line count kept (columns are UTF-8
    byte offsets, as `ast` gives them). An expression goes in parentheses, so that the
    operators around it keep binding as they did; a statement gets blank lines after it."""
    l1, l2 = node.lineno - 1, node.end_lineno - 1
    first, last = lines[l1].encode(), lines[l2].encode()
    prefix = first[: node.col_offset].decode()
    suffix = last[node.end_col_offset :].decode()
    if statement:
        body = [prefix + text + suffix] + [""] * (l2 - l1)
    elif l1 == l2:
        body = [f"{prefix}({text}){suffix}"]
    else:
        body = [f"{prefix}({text}"] + [""] * (l2 - l1 - 1) + [f"){suffix}"]
    return lines[:l1] + body + lines[l2 + 1 :]


def mutated_source(source: str, mutant: Mutant) -> str | None:
    """The mutated module as text, every line where it was (so that tools reading the source
    file, such as AutoGraph converting a function for tf.data, see the mutant too); None when
    the text cannot be made to parse to the mutated tree (then only the tree is compiled)."""
    tree = ast.parse(source)
    c = _candidates(tree)[mutant.index]
    target = c.shown(c.node)
    statement = isinstance(target, ast.stmt)
    c.apply(c.node)
    text = ast.unparse(_BoolOfNot().visit(copy.deepcopy(c.shown(c.node))))
    lines = source.splitlines()
    new = "\n".join(_replace(lines, target, text, statement)) + "\n"
    try:
        same = ast.dump(ast.parse(new)) == ast.dump(mutated_tree(source, mutant))
    except SyntaxError:
        same = False
    return new if same and len(new.splitlines()) == len(lines) else None


def compile_mutant(source: str, mutant: Mutant, filename: str):
    """The code object of the mutated module (line numbers kept)."""
    return compile(mutated_tree(source, mutant), filename, "exec", dont_inherit=True)
