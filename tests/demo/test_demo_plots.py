import numpy as np
import pytest
from PIL import Image

from cvbench.demo.plots import plot_curves, plot_detections


def _detections(score):
    return [
        {
            "boxes": np.array([[8.0, 10.0, 20.0, 12.0]]),
            "classes": np.array([1]),
            "scores": np.array([score]),
        }
    ]


def test_curves_png(tmp_path):
    path = tmp_path / "curves.png"
    plot_curves(
        {"a": {"loss": ([1, 2, 3], [3.0, 2.0, 1.0]), "empty": ([], [])}, "b": {"x": ([1], [1])}},
        path,
    )
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.size == (900, 360)  # 2 panels x 4.5 in x 100 dpi, 3.6 in high
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]


def test_curves_bad_input(tmp_path):
    with pytest.raises(ValueError, match="at least one panel"):
        plot_curves({}, tmp_path / "c.png")
    with pytest.raises(ValueError, match="'loss' has 2 x values and 1 y values"):
        plot_curves({"a": {"loss": ([1, 2], [1.0])}}, tmp_path / "c.png")


def test_detections_below_threshold_are_not_drawn(tmp_path):
    image = [np.full((32, 32, 3), 128, np.uint8)]
    names = ["circle", "square"]
    drawn, hidden, none = (tmp_path / f"{n}.png" for n in ("drawn", "hidden", "none"))
    plot_detections(image, _detections(0.9), names, drawn, score_threshold=0.5)
    plot_detections(image, _detections(0.1), names, hidden, score_threshold=0.5)
    empty = [{"boxes": np.zeros((0, 4)), "classes": np.zeros(0, int), "scores": np.zeros(0)}]
    plot_detections(image, empty, names, none, score_threshold=0.5)
    assert hidden.read_bytes() == none.read_bytes()
    assert drawn.read_bytes() != none.read_bytes()
    with Image.open(drawn) as im:
        pixels = np.asarray(im.convert("RGB")).reshape(-1, 3)
    # The box and its label use the class-1 colour #34c759 (52, 199, 89).
    assert np.any(np.all(np.abs(pixels.astype(int) - (52, 199, 89)) < 10, axis=1))


def test_detections_need_one_entry_per_image(tmp_path):
    with pytest.raises(ValueError, match="2 images and 1 detections"):
        plot_detections(
            [np.zeros((8, 8, 3), np.uint8)] * 2, _detections(1.0), ["a", "b"], tmp_path / "d.png"
        )
