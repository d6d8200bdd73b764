"""`cvbench eval --json` / `--log-dir` whose write fails after the evaluation (a full disk
is found only at the write): the results are on stdout already, and the one error line
says so (`evaluate.results_printed_above`), exit 1."""

from __future__ import annotations

import errno

import pytest
from inference_models import channel_classifier, classifier_info

from cvbench.cli import main
from cvbench.inference import save_model
from cvbench.utils import io

EVAL = ["eval", "--checkpoint", "cls.keras", "--synthetic", "--model", "resnet18",
        "--image-size", "8", "--num-classes", "3", "--batch-size", "2"]  # fmt: skip


@pytest.fixture
def model(tmp_path, monkeypatch):
    save_model(channel_classifier(), tmp_path / "cls.keras", classifier_info())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def disk_full_at(monkeypatch, name: str) -> None:
    """Writing a JSON file called `name` finds the disk full (as `atomic_path` reports it:
    the file asked for named)."""
    write = io.write_json_atomic

    def full(path, obj):
        if str(path).endswith(name):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write(path, obj)

    monkeypatch.setattr(io, "write_json_atomic", full)


@pytest.mark.parametrize(
    "flags, named",
    [(["--json", "out/x.json"], "out/x.json"), (["--log-dir", "run"], "run/results.json")],
)
def test_a_failed_results_write_says_the_results_were_printed_above(
    model, monkeypatch, capsys, flags, named
):
    disk_full_at(monkeypatch, named)
    assert main([*EVAL, *flags]) == 1
    captured = capsys.readouterr()
    printed = [line.split(":")[0] for line in captured.out.splitlines()]
    assert printed[:2] == ["loss", "top1"]  # the evaluation, on stdout before (3 classes)
    assert captured.err.splitlines()[-1] == (
        f"cvbench eval: error: {named}: No space left on device; the results were printed above"
    )


def test_an_error_before_the_results_is_not_said_to_follow_them(model, capsys):
    # A read-only or blocked --json is refused before evaluating: no results, no such words.
    (model / "pfile").write_text("a user's file")
    assert main([*EVAL, "--json", "pfile/x.json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == "cvbench eval: error: pfile: Not a directory"
