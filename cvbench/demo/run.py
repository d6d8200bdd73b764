"""`run_demo`: data, classifier, SSD, evaluation and the output folder, end to end.

Output folder:

    data/               the shapes sets and their TFRecords (reused by the next run)
    logs/classifier/    train_log.jsonl and tensorboard/ of the classifier's Trainer
    logs/ssd/           the same for the SSD
    classifier.keras    the trained classifier ([0, 255] RGB 64 x 64 input, logits)
    ssd.keras           the trained SSD ([0, 255] input; box codes and class logits)

Both model files hold built-in Keras layers only (plain `keras.saving.load_model` loads
them) and their `ModelInfo` (`cvbench.utils.model_file`: class names, size, decoding).
    curves.png          training loss and validation top-1 against the step
    detections.png      validation images with the SSD's boxes, classes and scores
    metrics.json        top-1, the 12 COCO numbers, per-class AP, timings, settings

The folder is the demo's own: a run writes only into a new or empty folder, or one an earlier
demo wrote, known by the marker file `.cvbench-demo.json` it writes first (`claim_output_dir`);
a folder holding anything else (a user's `logs/` or `metrics.json`) is refused before
anything is written or deleted.

Nothing is half-written: a run works in `.partial/` inside the output folder and moves its
results into place only once everything succeeded (`metrics.json` last); an interrupted run
(Ctrl-C) removes `.partial/` and leaves the previous results as they were; a killed one leaves
`.partial/`, which the next run removes. Rank 0 holds a lock on the folder for the whole run
(`LOCK`, an `flock` as a training run's): a second demo into the same folder is refused, one
line naming the first one's process, and deletes nothing. Under Horovod every rank trains and
evaluates; only rank 0 writes files and prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cvbench.demo.config import DemoConfig, demo_precision
from cvbench.demo.data import DemoData, prepare_data
from cvbench.demo.shapes import SHAPE_NAMES
from cvbench.training.run_dir import RunDirInUseError, RunFolder, hold_lock
from cvbench.training.run_log import read_run_history
from cvbench.training.signals import STOP_SIGNALS, TrainingInterruptedError
from cvbench.utils.errors import CvbenchError
from cvbench.utils.io import write_json_atomic
from cvbench.utils.model_file import save_model

STAGING = ".partial"
#: The file that marks a folder as the demo's output folder (written first, never removed).
MARKER = ".cvbench-demo.json"
#: The lock file rank 0 holds (`flock`) for the whole run: a second demo into the same
#: folder is refused, one line, instead of deleting the first one's `.partial/`.
LOCK = ".cvbench-demo.lock"
_ELSEWHERE = "choose another --output-dir"
RESULTS = ("logs", "classifier.keras", "ssd.keras", "curves.png", "detections.png")
METRICS = "metrics.json"
COCO_KEYS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    # a partial last line, and the records a resume made again, left out
    return read_run_history(path) if path.is_file() else []


def _curve_panels(logs_dir: Path) -> dict[str, dict[str, tuple[list, list]]]:
    """Plot series from the Trainers' JSON-lines logs, against the step."""

    def events(name: str, kind: str) -> list[dict[str, Any]]:
        entries = _read_jsonl(RunFolder(logs_dir / name).log)
        return [e for e in entries if e.get("event") == kind]

    def series(entries: list[dict[str, Any]], key: str) -> tuple[list, list]:
        kept = [e for e in entries if key in e]
        return [e["step"] for e in kept], [e[key] for e in kept]

    cls_steps, cls_epochs = events("classifier", "step"), events("classifier", "epoch")
    return {
        "classifier: training loss": {"loss": series(cls_steps, "loss")},
        "classifier: top-1": {
            "training (epoch mean)": series(cls_epochs, "top1"),
            "validation": series(cls_epochs, "val_top1"),
        },
        "SSD: training loss": {"loss": series(events("ssd", "step"), "loss")},
    }


def _publish(staging: Path, out: Path) -> None:
    """Moves the finished results from `staging` into `out`, replacing older ones."""
    for name in (*RESULTS, METRICS):
        src, dst = staging / name, out / name
        if not src.exists():
            continue
        if dst.is_dir() and not dst.is_symlink():
            old = out / f".{name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(dst, old)
            os.rename(src, dst)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(src, dst)


def _save_models(out: Path, config: DemoConfig, cls: Any, det: Any) -> None:
    """Writes `classifier.keras` and `ssd.keras` into `out/.partial/` as users get them:
    built-in Keras layers only (each task's `user_model`: the classifier takes `[0, 255]`
    RGB too), with each task's `ModelInfo` naming the shapes (the classifier's images are
    stretched to its size, as `shapes_preprocessing` does).

    Class order: the detector's index is the COCO category id - 1 (`SHAPE_NAMES` order); the
    classifier's is `build_imagenet`'s label order, the sorted class folder names (the
    records' `dataset_info.json` lists the same)."""
    from cvbench.demo.classify import classification_task
    from cvbench.demo.detect import detection_task

    data = DemoData.under(out / "data")  # the tasks' settings only: nothing is read
    for task, stage, name, names in (
        (classification_task(data, config), cls, "classifier.keras", tuple(sorted(SHAPE_NAMES))),
        (detection_task(data, config), det, "ssd.keras", SHAPE_NAMES),
    ):
        info = dataclasses.replace(task.model_info(), class_names=names, resize="stretch")
        save_model(task.user_model(stage.model), out / STAGING / name, info)


def claim_output_dir(out: str | os.PathLike, *, allow: tuple[str, ...] = ()) -> Path:
    """Makes `out` the demo's output folder: creates it and its `MARKER` when it is new or
    empty (or holds only the names in `allow`); accepts a folder that has the marker.

    Raises:
        ValueError: `out` holds other files and no marker (a folder the demo did not write),
            or is not a folder; nothing is changed then.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "notes.txt").write_text("mine")
        >>> claim_output_dir(d)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: ... holds files the demo did not write (notes.txt) ...
    """
    from cvbench.utils.errors import BadFileError
    from cvbench.utils.files import read_json

    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise ValueError(f"--output-dir {out} is not a folder")
    marker = out / MARKER
    if not marker.is_symlink():
        with contextlib.suppress(OSError, BadFileError):
            if read_json(marker, limit=4096, what="demo marker") == {"cvbench_demo": 1}:
                _refuse_links(out)
                return out
    _refuse_links(out)
    names = sorted(os.listdir(out)) if out.is_dir() else []
    others = [name for name in names if name not in allow]
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise ValueError(
            f"--output-dir {out} holds files the demo did not write ({shown}) and no "
            f"{MARKER}: choose a new or empty folder; nothing was changed"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(marker, {"cvbench_demo": 1})
    return out


def _refuse_links(out: Path) -> None:
    """A `ValueError` when an entry the demo writes in `out` (its data, `.partial/`, results,
    lock) is a symbolic link: the demo would build or write through it, outside `out`."""
    for name in ("data", STAGING, *RESULTS, METRICS, LOCK):
        if (out / name).is_symlink():
            raise ValueError(
                f"--output-dir {out}: {name} is a symbolic link; the demo never writes through "
                "a link: remove it; nothing was changed"
            )


class DemoInterruptedError(TrainingInterruptedError):
    """A demo stopped by SIGTERM or SIGINT: its partial work is removed and the previous
    results stay (the demo has no resume), so the line says that, not a training's "rerun
    with --resume"."""

    def __init__(self, stopped: TrainingInterruptedError, out: Path) -> None:
        name = STOP_SIGNALS.get(stopped.signum, f"signal {stopped.signum}")
        CvbenchError.__init__(
            self,
            f"{name} received: stopped; the results already in {out} are kept (this run's "
            "partial work was removed): run the demo again to start over",
        )
        self.signum, self.step, self.checkpoint = stopped.signum, stopped.step, None


def _summary_lines(metrics: dict[str, Any]) -> list[str]:
    cls, det, t = metrics["classifier"], metrics["detector"], metrics["timings_s"]
    cfg = metrics["config"]
    lines = [
        "=" * 64,
        "cvbench demo: shapes",
        f"  precision {metrics['precision']}, {metrics['ranks']} process(es), "
        f"{metrics['cpu_count']} CPU cores",
        f"  classifier ({cfg['backbone']}, {cfg['cls_image_size']} px): "
        f"top-1 {cls['top1']:.3f} on {cls['val_images']} validation images",
        f"  SSD ({cfg['det_image_size']} px): COCO AP {det['AP']:.3f}  "
        f"AP50 {det['AP50']:.3f}  AP75 {det['AP75']:.3f} on {det['val_images']} images",
    ]
    lines.append(
        "  per class AP: "
        + "  ".join(f"{n} {det.get('AP/' + n, float('nan')):.2f}" for n in SHAPE_NAMES)
    )
    lines.append(
        "  time: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in t.items() if k != "total")
        + f"; total {t['total']:.0f} s"
    )
    lines.append("=" * 64)
    return lines


def run_demo(
    output_dir: str | os.PathLike,
    *,
    config: DemoConfig | None = None,
    precision: str | None = None,
    prepare: bool = True,
    progress: bool = True,
    print_fn: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Runs the whole demo and writes its output folder (module docstring).

    Args:
        output_dir: the output folder (created).
        config: the settings (default `DemoConfig()`; `DemoConfig.quick()` for a smoke run).
        precision: the Trainer precision; None picks `demo_precision()` (mixed precision where
            the hardware computes it fast, else float32).
        prepare: build (or reuse) the data; False expects it built already (the Horovod
            launcher builds it once before starting the processes).
        progress: let the data builders show progress bars.
        print_fn: receives the summary lines (rank 0 only).

    Returns:
        The metrics written to `metrics.json` (on every rank).

    Raises:
        ValueError: `output_dir` is a folder the demo did not write (`claim_output_dir`).
    """
    from cvbench.training.distributed import get_distribution

    config = config or DemoConfig()
    start = time.perf_counter()
    out = Path(output_dir)
    distribution = get_distribution("auto")
    lock: list[int] = []
    try:
        data = _claimed_data(
            out, config, distribution, prepare=prepare, progress=progress, lock=lock
        )
        return _run_stages(out, config, data, distribution, precision, print_fn, start)
    finally:
        for fd in lock:
            os.close(fd)  # lets the folder go (module docstring)


def _run_stages(
    out: Path,
    config: DemoConfig,
    data: DemoData,
    distribution: Any,
    precision: str | None,
    print_fn: Callable[[str], None],
    start: float,
) -> dict[str, Any]:
    """`run_demo`'s training, evaluation and outputs, once rank 0 holds `out`."""
    chief = distribution.rank == 0
    timings: dict[str, float] = {"data": time.perf_counter() - start}
    precision = precision or demo_precision()

    staging = out / STAGING
    if chief:
        shutil.rmtree(staging, ignore_errors=True)  # a killed run's leftovers
        staging.mkdir(parents=True)
    distribution.broadcast_object(None)
    try:
        cls, det = _train_models(data, config, staging / "logs", precision, distribution)
        timings["classifier"] = cls.train_seconds + cls.eval_seconds
        timings["ssd"], timings["coco_eval"] = det.train_seconds, det.eval_seconds
        metrics = _demo_metrics(config, precision, distribution.size, cls, det)
        if chief:
            _write_outputs(out, config, data, cls, det, metrics, timings, start=start)
            for line in _summary_lines(metrics):
                print_fn(line)
            print_fn(f"results in {out}/ (tensorboard --logdir {out / 'logs'})")
    except BaseException as error:
        if chief:
            with contextlib.suppress(OSError):
                shutil.rmtree(staging)
        if isinstance(error, TrainingInterruptedError):
            raise DemoInterruptedError(error, out) from None
        raise
    metrics["timings_s"] = timings
    return metrics


def _train_models(
    data: DemoData, config: DemoConfig, logs: Path, precision: str, distribution: Any
) -> tuple[Any, Any]:
    """`(classifier, detector)` trained on `data`, their runs under `logs/classifier` and
    `logs/ssd`; the detector starts from the classifier's backbone."""
    from cvbench.demo.classify import train_classifier
    from cvbench.demo.detect import train_detector

    cls = train_classifier(
        data, config, log_dir=logs / "classifier", precision=precision, distribution=distribution
    )
    det = train_detector(
        data, config, log_dir=logs / "ssd", precision=precision, classifier=cls.model,
        distribution=distribution,
    )  # fmt: skip
    return cls, det


def _claimed_data(
    out: Path,
    config: DemoConfig,
    distribution: Any,
    *,
    prepare: bool,
    progress: bool,
    lock: list[int],
) -> DemoData:
    """The demo's data under `out/data`, built by rank 0 (`prepare`) once it has claimed
    `out` and taken its lock (`LOCK`, appended to `lock`: the caller closes it at the end);
    every rank waits for it, and raises rank 0's refusal of `out`.

    Raises:
        ValueError: `out` is a folder the demo did not write (`claim_output_dir`).
        RunDirInUseError: another demo run holds `out`.
    """
    chief = distribution.rank == 0
    refusal = None
    if chief:
        try:  # without `prepare`, the Horovod launcher has just built `data/` in it
            claim_output_dir(out, allow=() if prepare else ("data", LOCK))
            lock.append(hold_lock(out / LOCK, user="demo run", instead=_ELSEWHERE))
        except RunDirInUseError as e:
            refusal = ("in_use", str(e))
        except ValueError as e:
            refusal = ("value", str(e))
    if chief and prepare and refusal is None:
        data = prepare_data(out / "data", config, progress=progress)
    else:
        data = DemoData.under(out / "data")
    refusal = distribution.broadcast_object(refusal)  # every rank waits for the data
    if refusal is not None:
        raise (RunDirInUseError if refusal[0] == "in_use" else ValueError)(refusal[1])
    return data


def _demo_metrics(config: DemoConfig, precision: str, ranks: int, cls: Any, det: Any) -> dict:
    """What `metrics.json` holds but the timings: the run's setting, the machine, and each
    model's metrics, validation images, training throughput and epochs."""
    return {
        "precision": precision,
        "ranks": ranks,
        "cpu_count": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "platform": platform.platform(),
        "config": dataclasses.asdict(config),
        "classifier": {
            **cls.metrics,
            "val_images": config.cls_val_per_class * len(SHAPE_NAMES),
            "train_images_per_second": cls.images_per_second,
            "epochs": cls.epochs,
        },
        "detector": {
            **det.metrics,
            "val_images": config.det_num_val,
            "train_images_per_second": det.images_per_second,
            "epochs": det.epochs,
        },
    }


def _write_outputs(
    out: Path,
    config: DemoConfig,
    data: DemoData,
    cls: Any,
    det: Any,
    metrics: dict,
    timings: dict[str, float],
    *,
    start: float,
) -> None:
    """Rank 0's outputs, written in the staging folder then published into `out`: the
    models (without the runs' checkpoints), the curves, sample detections and
    `metrics.json` with the `timings` (`start`: the demo's start time)."""
    from cvbench.demo.detect import sample_detections, top_n_threshold
    from cvbench.demo.plots import plot_curves, plot_detections

    staging = out / STAGING
    logs = staging / "logs"
    t = time.perf_counter()
    for tree in (logs / "classifier", logs / "ssd"):
        shutil.rmtree(RunFolder(tree).checkpoints, ignore_errors=True)
    _save_models(out, config, cls, det)
    plot_curves(_curve_panels(logs), staging / "curves.png", xlabel="step")
    images, dets, num_objects = sample_detections(staging / "ssd.keras", data)
    plot_detections(
        images,
        dets,
        SHAPE_NAMES,
        staging / "detections.png",
        score_threshold=top_n_threshold(dets, num_objects),
        title=f"the {num_objects} best detections ({num_objects} objects in these images)",
    )
    timings["outputs"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    metrics["timings_s"] = timings
    write_json_atomic(staging / METRICS, metrics)
    _publish(staging, out)
    shutil.rmtree(staging, ignore_errors=True)
