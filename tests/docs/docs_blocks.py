"""Finds the fenced code blocks of the Markdown docs and the `docs-test` directive of each.

Every fenced block in README.md and docs/*.md is exercised by `test_doc_blocks.py`. How is
said by an HTML comment (invisible once rendered) on the line just above the fence:

    <!-- docs-test: run sub="epochs=90=>epochs=1" -->
    ```python
    ...
    ```

Grammar (shell-like words after `docs-test:`): a mode, then flags and `key=value` options.

Modes:
    run     execute the block: Python in-process, shell commands one by one (the default for
            `python` and `bash` blocks without a directive);
    parse   check without running: each shell command is parsed by the real argument parser
            of the program it calls (cvbench, horovodrun, the scripts, make -n, pip extras,
            docker build against the Dockerfile); Python is compiled and its imports resolved.
            Needs `why="..."`;
    output  the block shows a program's output: `cmd="..."` (or the block's own `$ ` lines)
            is run at tiny size and every shown line, with numbers masked, must appear in the
            real output in the same order;
    layout  the block shows a folder tree: `cmd="..."` is run and every path of the tree
            (`<name>` matches anything) must exist under `root=`;
    synopsis  a usage summary of cvbench commands: every `--flag` must be an option of its
            command and every `a|b|c` list the option's choices;
    figure  a text diagram of the package: every module path it names (`data/reader`,
            `tasks/`, `zoo.py`, `detection/targets`) must exist under `cvbench/`.

Options: `sub="OLD=>NEW"` (repeatable; replaces OLD with NEW before anything else, as a whole
word where OLD starts or ends with a word character), `out=/data/x` (a path the block writes:
it starts empty instead of holding the test data set of that name), `continue` (Python: run
in the namespace and folder of the previous block of the same file), `slow`, `why="..."`,
`coco-mirror` (COCO downloads come from a local server holding tiny COCO 2017 zips).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("run", "parse", "output", "layout", "synopsis", "figure")
_FLAGS = ("continue", "slow", "coco-mirror")
_KEYS = ("sub", "out", "why", "cmd", "root")
_DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)\s*$")
RUNNABLE_LANGS = ("python", "bash", "sh", "shell")


class DirectiveError(ValueError):
    """A block without a usable directive, or a directive that does not parse."""


@dataclass(frozen=True)
class Directive:
    """What to do with one block (see the module docstring)."""

    mode: str
    subs: tuple[tuple[str, str], ...] = ()
    outs: tuple[str, ...] = ()
    flags: frozenset[str] = frozenset()
    why: str = ""
    cmd: str = ""
    root: str = ""

    @classmethod
    def parse(cls, body: str) -> Directive:
        """Parses the text after `docs-test:`; raises `DirectiveError` naming the problem."""
        try:
            words = shlex.split(body)
        except ValueError as e:
            raise DirectiveError(f"directive {body!r}: {e}") from None
        if not words or words[0] not in MODES:
            raise DirectiveError(f"directive {body!r}: the first word must be one of {MODES}")
        mode, subs, outs, flags, single = words[0], [], [], set(), {}
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if not eq:
                if word not in _FLAGS:
                    raise DirectiveError(f"directive {body!r}: unknown flag {word!r}")
                flags.add(word)
            elif key == "sub":
                old, arrow, new = value.partition("=>")
                if not arrow or not old:
                    raise DirectiveError(f"directive {body!r}: sub needs OLD=>NEW, got {value!r}")
                subs.append((old, new))
            elif key == "out":
                outs.append(value)
            elif key in _KEYS:
                single[key] = value
            else:
                raise DirectiveError(f"directive {body!r}: unknown option {key!r}")
        directive = cls(mode, tuple(subs), tuple(outs), frozenset(flags), **single)
        if mode == "parse" and not directive.why:
            raise DirectiveError(f'directive {body!r}: parse needs why="..." (why not run)')
        if mode == "layout" and not directive.root:
            raise DirectiveError(f"directive {body!r}: layout needs root=PATH")
        return directive


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its info string, its text and its directive."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    directive: Directive = field(compare=False)

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"

    def substituted(self, text: str | None = None, *, strict: bool = True) -> str:
        """`text` (default: the block's) with the directive's `sub` replacements applied;
        `strict`: a replacement that matches nothing is an error."""
        text = self.text if text is None else text
        for old, new in self.directive.subs:
            pattern = re.escape(old)
            if re.match(r"\w", old):
                pattern = r"(?<!\w)" + pattern
            if re.search(r"\w$", old):
                pattern += r"(?!\w)"
            text, count = re.subn(pattern, lambda _m, new=new: new, text)
            if count == 0 and strict:
                raise DirectiveError(f"{self.id}: sub {old!r} matches nothing in the block")
        return text


def parse_markdown(path: Path, text: str | None = None) -> list[Block]:
    """Every fenced block of one Markdown file, with its directive.

    A block without a directive gets `run` if its language is python or bash/sh/shell;
    any other block (plain text, output, a folder tree) must carry one.

    Raises:
        DirectiveError: a block without a usable directive, a bad directive, a directive not
            followed by a fence, or an unclosed fence.
    """
    path = Path(path)
    lines = (path.read_text() if text is None else text).splitlines()
    blocks, pending, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        fence = _FENCE.match(line)
        if directive:
            if pending is not None:
                raise DirectiveError(f"{path.name}:{pending[0]}: directive not followed by a fence")
            pending = (i + 1, Directive.parse(directive["body"]))
        elif fence:
            indent, marker, lang = fence["indent"], fence["fence"], fence["lang"].lower()
            end = i + 1
            while end < len(lines) and lines[end].strip() != marker:
                end += 1
            if end == len(lines):
                raise DirectiveError(f"{path.name}:{i + 1}: unclosed code fence")
            body = "\n".join(_dedent(x, indent) for x in lines[i + 1 : end]) + "\n"
            if pending is not None:
                chosen = pending[1]
            elif lang in RUNNABLE_LANGS:
                chosen = Directive("run")
            else:
                raise DirectiveError(
                    f"{path.name}:{i + 1}: a {lang or 'plain'} block needs a directive on the "
                    'line above it, e.g. <!-- docs-test: output cmd="..." --> '
                    "(see tests/docs/docs_blocks.py)"
                )
            blocks.append(Block(path, i + 1, lang, body, chosen))
            pending, i = None, end
        elif pending is not None and line.strip():
            raise DirectiveError(f"{path.name}:{pending[0]}: directive not followed by a fence")
        i += 1
    if pending is not None:
        raise DirectiveError(f"{path.name}:{pending[0]}: directive not followed by a fence")
    return blocks


def _dedent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip()


# Generated from the code, and checked against it by test_api_docs.py instead.
GENERATED = ("api.md",)


def doc_files(root: Path) -> list[Path]:
    """README.md and docs/*.md under the repository `root` (but the generated API
    reference), sorted."""
    docs = [p for p in sorted((root / "docs").glob("*.md")) if p.name not in GENERATED]
    return [root / "README.md", *docs]
