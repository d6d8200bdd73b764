import subprocess
import sys

import pytest

from cvbench.cli import build_parser, main


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    parser = build_parser()
    names = parser._subparsers._group_actions[0].choices.keys()
    for name in names:
        assert name in out


def test_unknown_command_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["no-such-command"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_console_script_version():
    out = subprocess.run(
        [sys.executable, "-m", "cvbench", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert out.stdout.startswith("cvbench ")


def test_abbreviated_options_are_errors(capsys):
    # argparse would take `--epoch` for `--epochs`; a later `--epoch-...` option would then
    # silently change what the line means.
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--model", "resnet50", "--synthetic", "--epoch", "3"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --epoch 3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["build-imagenet", "--raw", "r", "--output-dir", "o"])  # not --raw-dir
