"""A drawing that fails or is stopped leaves no empty folder it made (`draw_results`, which
`cvbench predict --draw` calls): the folders it created are removed when still empty, never
one that existed before or holds anything."""

from __future__ import annotations

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info
from PIL import Image

from cvbench.inference import draw
from cvbench.inference.classification import classify

pytestmark = pytest.mark.backend_agnostic
DRAW = draw.draw_classification


@pytest.fixture
def results(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for name in ("a", "b"):
        Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(images / f"{name}.png")
    return classify(channel_classifier(), images, info=classifier_info()), images


def failing_at(monkeypatch, n: int, error: BaseException) -> None:
    """The `n`-th drawing (0-based) raises `error` (a failure, or a signal's exception)."""
    calls = []

    def drawing(image, result):
        calls.append(1)
        if len(calls) > n:
            raise error
        return DRAW(image, result)

    monkeypatch.setattr(draw, "draw_classification", drawing)


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_folder_made_for_the_drawings_is_removed_when_nothing_was_drawn(
    tmp_path, results, monkeypatch, error
):
    found, images = results
    failing_at(monkeypatch, 0, error)
    with pytest.raises(type(error)):
        draw.draw_results(found, images, tmp_path / "out" / "sub" / "drawn")
    assert not (tmp_path / "out").exists()  # the three levels it made, deepest first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images"]


def test_a_folder_that_existed_or_holds_a_drawing_is_kept(tmp_path, results, monkeypatch):
    found, images = results
    (tmp_path / "mine").mkdir()  # the user's empty folder: kept, empty
    failing_at(monkeypatch, 0, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        draw.draw_results(found, images, tmp_path / "mine" / "drawn")
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())

    failing_at(monkeypatch, 1, ValueError("second drawing"))  # the first is written
    with pytest.raises(ValueError, match="second drawing"):
        draw.draw_results(found, images, tmp_path / "made" / "drawn")
    assert sorted(p.name for p in (tmp_path / "made" / "drawn").iterdir()) == ["a.png"]
