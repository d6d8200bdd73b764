"""SIGINT during `cvbench predict --draw` leaves no empty folder it made (the drawing
folder and its parents, removed when still empty), and never one that existed."""

from __future__ import annotations

import pytest
from test_seams_hostile_probe import cvbench, lines, work  # noqa: F401 - work: a fixture

KEPT = "the files written so far are kept; none is half-written"


@pytest.mark.slow
def test_sigint_during_predict_draw_removes_the_empty_folders_it_made(work):  # noqa: F811
    (work / "mine").mkdir()
    for draw_dir in ("out/drawn", "mine/drawn"):
        run = cvbench(
            "predict", "cls.keras", "images", "--draw", draw_dir, cwd=work,
            signal_after="cvbench.inference.draw.draw_classification",
        )  # fmt: skip
        assert run.returncode == 130, run.stderr[-3000:]
        assert lines(run) == [f"cvbench predict: SIGINT received: stopped; {KEPT}"]
    assert sorted(p.name for p in work.iterdir()) == ["cls.keras", "images", "mine"]
    assert list((work / "mine").iterdir()) == []  # the user's folder kept, as it was
