"""The demo's pictures: training curves and a grid of detections, written as PNG files.

matplotlib is imported inside the functions, with the non-interactive Agg backend, so that
importing `cvbench.demo` needs neither matplotlib nor a display. Files are written
atomically (a reader never sees half a PNG).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np

from cvbench.utils.io import atomic_path

# One series: (x values, y values), the same length.
Series = tuple[Sequence[float], Sequence[float]]

_BOX_COLOURS = ("#ff3b30", "#34c759", "#0a84ff", "#ffd60a", "#bf5af2", "#64d2ff", "#ff9f0a")


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the demo's plots need matplotlib: pip install 'matplotlib>=3.7'") from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_curves(
    panels: Mapping[str, Mapping[str, Series]],
    path: str | os.PathLike,
    *,
    xlabel: str = "epoch",
) -> None:
    """Draws one panel per entry of `panels`, each with one line per series.

    Args:
        panels: panel title -> (series name -> (x, y)). Empty series are skipped.
        path: the PNG to write.
        xlabel: the x-axis label of every panel.
    """
    if not panels:
        raise ValueError("plot_curves needs at least one panel, got none")
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (title, series) in zip(axes[0], panels.items(), strict=True):
        for name, (x, y) in series.items():
            if len(x) != len(y):
                raise ValueError(f"series {name!r} has {len(x)} x values and {len(y)} y values")
            if len(x):
                ax.plot(x, y, marker="o", markersize=3, label=name)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if any(len(x) for x, _ in series.values()):
            ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def plot_detections(
    images: Sequence[np.ndarray],
    detections: Sequence[Mapping[str, np.ndarray]],
    class_names: Sequence[str],
    path: str | os.PathLike,
    *,
    score_threshold: float = 0.3,
    columns: int = 4,
    title: str | None = None,
) -> None:
    """Draws each image with its detected boxes, class names and scores, in a grid.

    Args:
        images: uint8 [H, W, 3] RGB images.
        detections: one mapping per image with "boxes" float [N, 4] as COCO
            `[x, y, width, height]` in that image's pixels, "classes" int [N] (indices into
            `class_names`) and "scores" float [N].
        class_names: the name of each class index.
        path: the PNG to write.
        score_threshold: boxes scoring below this are not drawn.
        columns: images per row.
        title: a title over the grid.
    """
    if len(images) != len(detections) or not images:
        raise ValueError(
            f"need as many detections as images (and at least one image), got "
            f"{len(images)} images and {len(detections)} detections"
        )
    plt = _pyplot()
    from matplotlib.patches import Rectangle

    columns = min(columns, len(images))
    rows = math.ceil(len(images) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.0 * columns, 3.0 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, image, det in zip(axes.ravel(), images, detections, strict=False):
        ax.imshow(image)
        keep = np.asarray(det["scores"]) >= score_threshold
        for (x, y, w, h), c, s in zip(
            np.asarray(det["boxes"])[keep],
            np.asarray(det["classes"])[keep],
            np.asarray(det["scores"])[keep],
            strict=True,
        ):
            colour = _BOX_COLOURS[int(c) % len(_BOX_COLOURS)]
            # imshow puts pixel centres on integers: pixel edges sit at -0.5.
            ax.add_patch(
                Rectangle((x - 0.5, y - 0.5), w, h, fill=False, edgecolor=colour, linewidth=1.5)
            )
            ax.text(
                x,
                y - 1,
                f"{class_names[int(c)]} {s:.2f}",
                color="black",
                fontsize=7,
                va="bottom",
                bbox={"facecolor": colour, "edgecolor": "none", "pad": 1, "alpha": 0.85},
            )
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
