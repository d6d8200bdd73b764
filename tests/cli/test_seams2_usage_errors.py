"""A command line argparse refuses is one line on stderr and exit 2 (the house rule of
every cvbench error): `cvbench train: error: ... (see cvbench train --help)`, without
argparse's usage block before it; every command, an unknown flag and a missing required
argument."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from cvbench.cli import build_parser, main

pytestmark = pytest.mark.backend_agnostic


def commands() -> dict[str, argparse.ArgumentParser]:
    return dict(build_parser()._subparsers._group_actions[0].choices)


def has_required(parser: argparse.ArgumentParser) -> bool:
    groups = parser._mutually_exclusive_groups
    return any(a.required for a in parser._actions) or any(g.required for g in groups)


def refused(argv: list[str], capsys) -> str:
    """The one line `main(argv)` prints on stderr before exiting with 2."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    captured = capsys.readouterr()
    assert stop.value.code == 2
    assert captured.out == ""
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1, captured.err
    return captured.err.rstrip("\n")


def test_every_command_is_covered():
    # The commands with a required argument (each also refused without it, below).
    assert sorted(n for n, p in commands().items() if has_required(p)) == [
        "benchmark", "build-coco", "build-imagenet", "dali-index", "download-coco", "eval",
        "export", "extract-imagenet", "predict", "train",
    ]  # fmt: skip


@pytest.mark.parametrize("command", sorted(commands()))
def test_an_unknown_flag_is_one_line_and_exit_2(command, capsys):
    # The required arguments are given where there are any (else argparse names them first).
    line = refused([command, *minimal(command), "--bogus-flag"], capsys)
    assert line == (
        f"cvbench {command}: error: unrecognized arguments: --bogus-flag "
        f"(see cvbench {command} --help)"
    )


@pytest.mark.parametrize("command", sorted(n for n, p in commands().items() if has_required(p)))
def test_a_missing_required_argument_is_one_line_and_exit_2(command, capsys):
    line = refused([command], capsys)
    assert line.startswith(f"cvbench {command}: error: ")
    assert "required" in line and line.endswith(f" (see cvbench {command} --help)")


def test_the_root_parser_and_bad_values_are_one_line(capsys):
    assert refused([], capsys) == (
        "cvbench: error: the following arguments are required: COMMAND (see cvbench --help)"
    )
    assert refused(["no-such-command"], capsys).startswith(
        "cvbench: error: argument COMMAND: invalid choice: 'no-such-command'"
    )
    assert refused(["train", "--synthetic", "--batch-size", "x"], capsys).startswith(
        "cvbench train: error: argument --batch-size: "
    )
    # A control character the user typed is escaped: the error stays one line.
    assert refused(["train", "--synthetic", "--bo\ngus"], capsys) == (
        "cvbench train: error: unrecognized arguments: --bo\\ngus (see cvbench train --help)"
    )


def test_the_console_command_prints_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "cvbench", "export", "m.keras", "--output", "o", "--bogus"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "cvbench export: error: unrecognized arguments: --bogus (see cvbench export --help)"
    ]


def minimal(command: str) -> list[str]:
    """Arguments that satisfy `command`'s required ones (none are run: the flag is refused)."""
    return {
        "benchmark": ["--synthetic"],
        "build-coco": ["o", "--coco-dir", "c"],
        "build-imagenet": ["--raw-dir", "r", "--output-dir", "o"],
        "dali-index": ["d"],
        "download-coco": ["d"],
        "eval": ["--checkpoint", "c", "--synthetic"],
        "export": ["m.keras", "--output", "o"],
        "extract-imagenet": ["o"],
        "predict": ["m.keras", "i.png"],
        "train": ["--synthetic"],
    }.get(command, [])
