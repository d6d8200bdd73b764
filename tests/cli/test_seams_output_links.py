"""One rule for an output path that is a symbolic link, for every command that writes: the
path the user names may itself be a link, resolved once (`cvbench.utils.files.user_output`,
applied by `cvbench.cli.main` to `OUTPUT_ARGS`), and the command writes to, checks and
prints its target; links inside an output are never followed (`owned_folder`,
`open_output`, `check_output`); a dangling link is refused, naming it.

Before: `--log-dir LINK` and `--output-dir LINK` were followed while `--json LINK`,
`--coco-json LINK` and `export --output LINK` were refused as links.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cvbench import cli
from cvbench.cli import OUTPUT_ARGS, build_parser


def make_raw(root: Path, **kwargs):
    """`tests/data/imagenet_testdata.make_raw` (a folder of the data tests)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
    from imagenet_testdata import make_raw as make

    return make(root, **kwargs)


#: Argument names that name an output in some command (a bool `--json` aside).
_OUTPUT_NAMES = {"log_dir", "json", "coco_json", "draw", "output", "output_dir", "index_dir",
                 "out", "dir", "build_tfrecords"}  # fmt: skip


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_table_names_every_output_argument_of_every_command():
    found = {}
    for command, sub in _subparsers().items():
        dests = {
            a.dest
            for a in sub._actions
            if a.dest in _OUTPUT_NAMES and not isinstance(a, argparse._StoreTrueAction)
        }
        if dests:
            found[command] = dests
    assert found == {command: set(dests) for command, dests in OUTPUT_ARGS.items()}


def test_build_imagenet_into_a_linked_folder_writes_and_prints_its_target(tmp_path, capsys):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    (tmp_path / "disk").mkdir()
    (tmp_path / "out").symlink_to("disk")
    argv = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(tmp_path / "out")]
    argv += ["--train-shards", "1", "--val-shards", "1", "--workers", "1", "--no-progress"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"output: {(tmp_path / 'disk').resolve()}\n" in out
    assert (tmp_path / "out").is_symlink()  # the link itself is never replaced
    assert sorted(p.name for p in (tmp_path / "disk").glob("*-of-*")) == [
        "train-00000-of-00001",
        "validation-00000-of-00001",
    ]
    assert json.loads((tmp_path / "disk" / "dataset_info.json").read_text())["kind"] == ("imagenet")


def test_a_refusal_of_a_linked_output_names_the_link_and_its_target(tmp_path, capsys):
    raw = make_raw(tmp_path / "raw", val_layout="folders").root
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    (tmp_path / "out").symlink_to("victim.txt")
    argv = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(tmp_path / "out")]
    argv += ["--train-shards", "1", "--val-shards", "1", "--workers", "1", "--no-progress"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    target = str(victim.resolve())
    assert err == (
        f"cvbench build-imagenet: error: {target}: is a file, not a folder "
        f"({tmp_path / 'out'} is a link to {target})\n"
    )
    assert victim.read_text() == "the user's"


@pytest.mark.parametrize("kind", ["dangling", "plain"])
def test_user_output_leaves_what_is_not_a_link_to_something(tmp_path, kind):
    from cvbench.utils.files import user_output

    path = tmp_path / "out"
    if kind == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    for given in (str(path), path):
        assert user_output(given) is given  # refused later by the command, naming it
    assert user_output(None) is None and user_output(True) is True
    assert Path(user_output(str(path))) == path
