"""The demo's pictures (training curves, a grid of detections) and a run's (`plot_run`:
loss, learning rate and accuracy or AP per epoch; per-class AP), written as PNG files.

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
    ylabels: Mapping[str, str] | None = None,
    title: str | None = None,
) -> None:
    """Draws one panel per entry of `panels`, each with one line per series.

    Args:
        panels: panel title -> (series name -> (x, y)). Empty series are skipped; NaN
            values are gaps.
        path: the PNG to write.
        xlabel: the x-axis label of every panel.
        ylabels: panel title -> its y-axis label (default: none).
        title: a title over the panels.
    """
    if not panels:
        raise ValueError("plot_curves needs at least one panel, got none")
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (panel, series) in zip(axes[0], panels.items(), strict=True):
        for name, (x, y) in series.items():
            if len(x) != len(y):
                raise ValueError(f"series {name!r} has {len(x)} x values and {len(y)} y values")
            if len(x):
                ax.plot(x, y, marker="o", markersize=3, label=name)
        ax.set_title(panel)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs and steps are whole
        if ylabels and panel in ylabels:
            ax.set_ylabel(ylabels[panel])
        ax.grid(alpha=0.3)
        if any(len(x) for x, _ in series.values()):
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
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


def plot_bars(
    values: Mapping[str, float],
    path: str | os.PathLike,
    *,
    xlabel: str,
    title: str,
) -> None:
    """Draws one horizontal bar per entry of `values` (name -> value), in the given order,
    the value written at the end of each bar.

    Args:
        values: bar label -> value.
        path: the PNG to write.
        xlabel: the value axis' label.
        title: the title.
    """
    if not values:
        raise ValueError("plot_bars needs at least one value, got none")
    plt = _pyplot()
    names, numbers = list(values), [float(v) for v in values.values()]
    fig, ax = plt.subplots(figsize=(6.4, 1.2 + 0.3 * len(names)))
    bars = ax.barh(range(len(names)), numbers, color="#0a84ff")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()  # the first entry on top
    ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
    ax.set_xlim(0, max(1.0, max(numbers) * 1.15))
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


#: What `plot_run` draws per epoch: panel -> (y label, the history's series in it).
RUN_PANELS = {
    "loss": ("loss", ("loss", "val_loss")),
    "learning rate": ("learning rate", ("learning_rate",)),
    "accuracy": ("accuracy (fraction)", ("top1", "top5", "val_top1", "val_top5")),
    "COCO AP": ("AP", ("val_AP", "val_AP50", "val_AP75")),
}


#: The legend's name of a history series.
SERIES_LABELS = {
    "loss": "training",
    "val_loss": "validation",
    "learning_rate": "learning rate",
    "top1": "training top-1",
    "top5": "training top-5",
    "val_top1": "validation top-1",
    "val_top5": "validation top-5",
    "val_AP": "validation AP",
    "val_AP50": "validation AP50",
    "val_AP75": "validation AP75",
}


def plot_run(
    history: Mapping[str, Sequence[float]],
    metrics: Mapping[str, float],
    folder: str | os.PathLike,
    *,
    title: str = "",
) -> list[str]:
    """A training run's plots in `folder` (made by the caller, e.g. the run folder's
    `plots/`): `training.png`, one panel per epoch curve the run has (loss, learning rate,
    accuracy for classifiers or COCO AP for detectors: the training values, the validation
    ones (`val_<name>`) and the final evaluation's as a point at the last epoch), and, when
    `metrics` holds per-class AP (`AP/<class>`, COCO's -1 for a class without ground truth
    left out), `per_class_ap.png`.

    Args:
        history: the run's epochs (`cvbench.tasks.runner.TaskRun.epoch_history`).
        metrics: the final evaluation's results (may be empty).
        folder: where the PNGs go.
        title: a title over the curves (e.g. the model and recipe).

    Returns:
        The paths written, as strings.
    """
    folder = os.fspath(folder)
    written = []
    epochs = list(history.get("epoch", ()))
    panels: dict[str, dict[str, Series]] = {}
    ylabels = {}
    for panel, (ylabel, names) in RUN_PANELS.items():
        series: dict[str, Series] = {}
        for name in names:
            values = list(history.get(name, ()))
            if values and not all(math.isnan(v) for v in values):
                series[SERIES_LABELS.get(name, name)] = (epochs, values)
            final = name[len("val_") :] if name.startswith("val_") else None
            if epochs and final in metrics and name not in history:
                label = SERIES_LABELS.get(name, name).replace("validation", "final evaluation")
                series[label] = ([epochs[-1]], [float(metrics[final])])
        if series:
            panels[panel], ylabels[panel] = series, ylabel
    if panels:
        path = os.path.join(folder, "training.png")
        plot_curves(panels, path, xlabel="epoch", ylabels=ylabels, title=title or None)
        written.append(path)
    per_class = {
        k[len("AP/") :]: float(v) for k, v in metrics.items() if k.startswith("AP/") and v >= 0
    }
    if per_class:
        path = os.path.join(folder, "per_class_ap.png")
        ordered = dict(sorted(per_class.items(), key=lambda kv: -kv[1]))
        plot_bars(ordered, path, xlabel="AP@[.5:.95] (COCO)", title="AP per class")
        written.append(path)
    return written
