"""Every fenced code block of README.md and docs/*.md runs, or is checked, at tiny sizes.

One test per block (`README.md:14`, `training.md:10`, ...), exercised as the `docs-test`
directive above it says (see docs_blocks.py); a block without a usable directive fails
`test_doc_file_directives`. The blocks of a file share the docker image tags it builds, and
a `continue` block runs in the namespace of the block before it.
"""

from __future__ import annotations

import contextlib

import pytest
from docs_blocks import Block, DirectiveError, doc_files, parse_markdown
from docs_commands import ROOT, split_commands
from docs_exercise import Workspace, exercise
from docs_parsers import check_inline_commands

FILES = doc_files(ROOT)


def _blocks() -> list[Block]:
    found = []
    for path in FILES:
        with contextlib.suppress(DirectiveError):  # reported by test_doc_file_directives
            found += parse_markdown(path)
    return found


BLOCKS = _blocks()
_WORKSPACES: dict[str, Workspace] = {}


def _docker_tags() -> set[str]:
    tags = set()
    for block in BLOCKS:
        if block.lang in ("bash", "sh"):
            for cmd in split_commands(block.text):
                if cmd.argv[:2] == ["docker", "build"] and "-t" in cmd.argv:
                    tags.add(cmd.argv[cmd.argv.index("-t") + 1])
    return tags


def _workspace(block: Block, tmp_path_factory, doc_data) -> Workspace:
    """A fresh folder, or for a `continue` block the one its predecessor ran in (run first)."""
    if "continue" not in block.directive.flags:
        return Workspace(tmp_path_factory.mktemp(block.path.stem))
    previous = [b for b in BLOCKS if b.path == block.path and b.line < block.line]
    if not previous:
        raise DirectiveError(f"{block.id}: `continue` on the first block of the file")
    before = previous[-1]
    if before.id not in _WORKSPACES:
        ws = _workspace(before, tmp_path_factory, doc_data)
        exercise(before, ws, doc_data, _docker_tags())
        return ws
    return _WORKSPACES.pop(before.id)


def _continued(block: Block) -> bool:
    """Whether the next block of the same file runs in this one's namespace."""
    after = [b for b in BLOCKS if b.path == block.path and b.line > block.line]
    return bool(after) and "continue" in after[0].directive.flags


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_doc_file_directives(path):
    blocks = parse_markdown(path)  # raises DirectiveError naming the block
    assert all(b.directive.mode for b in blocks)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_inline_commands(path):
    check_inline_commands(path.read_text())


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=b.id, marks=[pytest.mark.slow] if "slow" in b.directive.flags else [])
        for b in BLOCKS
    ],
)
def test_doc_block(block, tmp_path_factory, doc_data, request, monkeypatch):
    if "coco-mirror" in block.directive.flags:  # download_coco fetches from a local mirror
        from cvbench.data.acquire import coco_download

        base, files = request.getfixturevalue("coco_mirror")
        monkeypatch.setenv(coco_download.COCO_BASE_URL_ENV, base)
        monkeypatch.setattr(coco_download, "COCO_2017_FILES", files)
    workspace = _workspace(block, tmp_path_factory, doc_data)
    exercise(block, workspace, doc_data, _docker_tags())
    # Kept only for the block that continues it: a namespace holds the block's models and
    # tensors, and every block's kept to the end of the session grew the suite by gigabytes.
    if _continued(block):
        _WORKSPACES[block.id] = workspace


def test_only_namespaces_a_later_block_continues_are_kept():
    # Runs after the blocks above (pytest keeps a file's order): a kept namespace holds its
    # block's models, so one no block continues is memory held to the end of the session.
    by_id = {b.id: b for b in BLOCKS}
    assert all(_continued(by_id[i]) for i in _WORKSPACES)
