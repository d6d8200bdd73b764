"""`--max-pixels` bounds the images of --data-dir records: with --synthetic data (train, eval,
benchmark) or DALI (whose decoder has its own limits) it would do nothing, so it is refused
by the data-flag rule (`cvbench.cli.task_args.DATA_FLAGS`): one line, exit 2, nothing written.

Before: `cvbench benchmark --synthetic --max-pixels 100` (and train, eval) ran and ignored it.
"""

from __future__ import annotations

import pytest

from cvbench import cli
from cvbench.cli import build_parser
from cvbench.cli.task_args import task_from_args
from cvbench.data.image_io import DEFAULT_MAX_PIXELS

_TINY = ["--model", "resnet18", "--image-size", "32", "--batch-size", "2", "--num-classes", "3"]
_REFUSED = (
    "cvbench: error: --max-pixels needs --data-backend tf or grain: it has no effect with "
    "--synthetic data\n"
)


@pytest.fixture
def no_run(monkeypatch):
    """Fails at once where a task is built (the old code went on to train or benchmark)."""
    import cvbench.tasks

    def refuse(*args, **kwargs):
        raise AssertionError("a task was built: --max-pixels was not refused")

    monkeypatch.setattr(cvbench.tasks, "make_task", refuse)


@pytest.mark.parametrize("command", ["train", "eval", "benchmark"])
def test_synthetic_data_refuses_max_pixels(tmp_path, capsys, no_run, command):
    argv = [command, *_TINY, "--synthetic", "--max-pixels", "100"]
    argv += ["--log-dir", str(tmp_path / "run")] if command == "train" else []
    argv += ["--checkpoint", str(tmp_path)] if command == "eval" else []
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == _REFUSED
    assert not (tmp_path / "run").exists()


def test_dali_refuses_max_pixels_on_the_command_line(tmp_path, capsys, no_run):
    (tmp_path / "data").mkdir()
    argv = ["eval", *_TINY, "--data-dir", str(tmp_path / "data"), "--checkpoint", str(tmp_path)]
    assert cli.main([*argv, "--data-backend", "dali", "--max-pixels", "100"]) == 2
    assert capsys.readouterr().err == (
        "cvbench: error: --max-pixels needs --data-backend tf or grain: it has no effect "
        "with DALI\n"
    )


@pytest.mark.parametrize(
    ("extra", "expected"), [([], DEFAULT_MAX_PIXELS), (["--max-pixels", "7"], 7)]
)
def test_max_pixels_still_reaches_the_records_reader(tmp_path, extra, expected):
    args = build_parser().parse_args(["train", *_TINY, "--data-dir", str(tmp_path), *extra])
    assert task_from_args(args).options.max_pixels == expected


def test_synthetic_data_without_max_pixels_is_accepted():
    args = build_parser().parse_args(["benchmark", *_TINY, "--synthetic"])
    assert task_from_args(args).options.max_pixels == DEFAULT_MAX_PIXELS
