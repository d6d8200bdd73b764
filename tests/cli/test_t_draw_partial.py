"""`cvbench predict --draw` stopped part-way (an error or Ctrl-C on the k-th drawing): the
drawings written before are recorded as cvbench's outputs as they are written, so a rerun
with `--overwrite` replaces them (it replaces only files cvbench recorded); the
`--coco-json` file written before the drawings is recorded too."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info, constant_detector, detector_info
from PIL import Image

import cvbench.cli
import cvbench.inference.draw as draw
from cvbench.inference import save_model
from cvbench.utils.files import written_by_cvbench

NAMES = ["a", "b", "c", "d"]
#: A disk filling up: one line naming it, exit 1.
FULL = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for i, name in enumerate(NAMES):
        Image.fromarray(np.full((20, 30, 3), (10 * i, 30, 20), np.uint8)).save(
            folder / f"{name}.png"
        )
    return folder


def failing_on(monkeypatch, function: str, k: int, error: BaseException) -> None:
    """`draw.<function>` raising `error` on its k-th call (1-based): k - 1 drawings are
    written first."""
    original, calls = getattr(draw, function), []

    def drawing(*args, **kwargs):
        calls.append(1)
        if len(calls) == k:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(draw, function, drawing)


@pytest.mark.parametrize(
    "k, error, code",
    [(3, FULL, 1), (2, KeyboardInterrupt(), 130), (1, FULL, 1)],
)
def test_drawings_written_before_a_failure_are_replaced_by_a_rerun_with_overwrite(
    tmp_path, images, monkeypatch, capsys, k, error, code
):
    model = save_model(channel_classifier(), tmp_path / "cls.keras", classifier_info())
    out = tmp_path / "drawn"
    argv = ["predict", str(model), str(images), "--draw", str(out)]
    with monkeypatch.context() as patch:
        failing_on(patch, "draw_classification", k, error)
        assert cvbench.cli.main(argv) == code
    capsys.readouterr()
    # Images are drawn in name order: the k - 1 before the failing one are written.
    written = sorted(p.name for p in out.glob("*.png")) if out.exists() else []
    assert written == [f"{n}.png" for n in NAMES[: k - 1]]
    assert all(written_by_cvbench(out / name) for name in written)

    assert cvbench.cli.main([*argv, "--overwrite"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.glob("*.png")) == [f"{n}.png" for n in NAMES]
    assert all(written_by_cvbench(p) for p in out.glob("*.png"))


def test_the_coco_json_written_before_a_failed_drawing_is_replaced_by_a_rerun(
    tmp_path, images, monkeypatch, capsys
):
    model = save_model(constant_detector(), tmp_path / "det.keras", detector_info())
    coco, out = tmp_path / "results.json", tmp_path / "drawn"
    argv = ["predict", str(model), str(images), "--coco-json", str(coco), "--draw", str(out)]
    with monkeypatch.context() as patch:
        failing_on(patch, "draw_detection", 2, FULL)
        assert cvbench.cli.main(argv) == 1
    capsys.readouterr()
    assert coco.is_file() and written_by_cvbench(coco)
    assert written_by_cvbench(out / "a.png")

    assert cvbench.cli.main([*argv, "--overwrite"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.glob("*.png")) == [f"{n}.png" for n in NAMES]


def test_draw_results_hands_each_drawing_to_on_written_as_it_is_written(tmp_path, images):
    """The library API: `on_written` sees each path once its file exists, in order."""
    from cvbench.inference.classification import Classification

    sources = sorted(str(p) for p in images.iterdir())
    results = [Classification(s, (0,), ("red",), (1.0,), (20, 30)) for s in sources]
    seen = []

    def on_written(path):
        assert path.is_file()
        seen.append(path.name)

    paths = draw.draw_results(results, sources, tmp_path / "d", on_written=on_written)
    assert seen == [p.name for p in paths] == [f"{n}.png" for n in NAMES]


def test_a_drawing_in_place_when_a_signal_stops_the_write_is_recorded(
    tmp_path, images, monkeypatch, capsys
):
    """Ctrl-C right after the second drawing's rename, before anything else: it is in place,
    so it is recorded too, and the rerun with --overwrite replaces both."""
    import contextlib

    model = save_model(channel_classifier(), tmp_path / "cls.keras", classifier_info())
    out = tmp_path / "drawn"
    argv = ["predict", str(model), str(images), "--draw", str(out)]
    original, calls = draw.atomic_path, []

    @contextlib.contextmanager
    def interrupted_after_the_second(path):
        with original(path) as tmp:
            yield tmp
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(draw, "atomic_path", interrupted_after_the_second)
        assert cvbench.cli.main(argv) == 130
    capsys.readouterr()
    assert sorted(p.name for p in out.glob("*.png")) == ["a.png", "b.png"]
    assert written_by_cvbench(out / "a.png") and written_by_cvbench(out / "b.png")
    assert cvbench.cli.main([*argv, "--overwrite"]) == 0, capsys.readouterr().err
