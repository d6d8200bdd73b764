"""COCO box evaluation: a thin adapter over pycocotools (or faster-coco-eval).

Detections arrive as COCO result dicts (`{"image_id", "category_id", "bbox": [x, y, w, h] in
original-image pixels, "score"}`); `detections_to_coco` builds them from the model's batched,
post-processed outputs (normalized `[ymin, xmin, ymax, xmax]` boxes, contiguous class indices).
`evaluate_coco` runs COCOeval and returns the 12 standard numbers:

    AP, AP50, AP75, APs, APm, APl, AR1, AR10, AR100, ARs, ARm, ARl

`backend="faster"` uses the C++ evaluator of `faster-coco-eval` (same numbers, several times
faster on val2017); it is imported only when asked for.

The other two ends of an evaluation live elsewhere: the model loop that makes the detections
is `cvbench.detection.predict.predict_coco`; the ground truth rebuilt from TFRecords (when the
annotation file is missing) is `cvbench.data.coco_schema.groundtruth_from_records`.

Ids and flags are read by build-coco's one rule (`cvbench.data.builders.coco_annotations`:
`coco_integer`, `coco_flag`) and the values handed to the evaluator are plain ints.

Detections and ground truth given as paths are read through `cvbench.utils.files.read_json`:
regular files of at most `MAX_JSON_BYTES` (2 GiB; COCO 2017's training annotations have 448
MB), nested at most `MAX_JSON_DEPTH` deep; a file that is not, or is no COCO file, is a
`BadFileError` naming it (exit 1 in the command), never a `RecursionError`.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cvbench.data.builders.coco_annotations import coco_flag, coco_integer
from cvbench.detection import box_ops
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import check_output, read_json
from cvbench.utils.io import atomic_open

#: The largest detections or ground-truth JSON file read.
MAX_JSON_BYTES = 2 << 30

COCO_METRIC_NAMES: tuple[str, ...] = (
    "AP",
    "AP50",
    "AP75",
    "APs",
    "APm",
    "APl",
    "AR1",
    "AR10",
    "AR100",
    "ARs",
    "ARm",
    "ARl",
)

# (precision?, IoU label, area, maxDets) for each of the 12 lines, in pycocotools' order.
_TABLE_ROWS: tuple[tuple[bool, str, str, int], ...] = (
    (True, "0.50:0.95", "all", 100),
    (True, "0.50", "all", 100),
    (True, "0.75", "all", 100),
    (True, "0.50:0.95", "small", 100),
    (True, "0.50:0.95", "medium", 100),
    (True, "0.50:0.95", "large", 100),
    (False, "0.50:0.95", "all", 1),
    (False, "0.50:0.95", "all", 10),
    (False, "0.50:0.95", "all", 100),
    (False, "0.50:0.95", "small", 100),
    (False, "0.50:0.95", "medium", 100),
    (False, "0.50:0.95", "large", 100),
)

BACKENDS: tuple[str, ...] = ("pycocotools", "faster")


def format_coco_table(metrics: Mapping[str, float]) -> str:
    """Formats the 12 numbers as the standard pycocotools summary table (12 lines).

    Args:
        metrics: a mapping holding at least the names in `COCO_METRIC_NAMES`.

    Returns:
        The table, lines joined by newlines, exactly as `COCOeval.summarize()` prints it.
    """
    lines = []
    for name, (is_ap, iou, area, max_dets) in zip(COCO_METRIC_NAMES, _TABLE_ROWS, strict=True):
        title = "Average Precision" if is_ap else "Average Recall"
        kind = "(AP)" if is_ap else "(AR)"
        lines.append(
            f" {title:<18} {kind} @[ IoU={iou:<9} | area={area:>6s} | maxDets={max_dets:>3d} ]"
            f" = {metrics[name]:0.3f}"
        )
    return "\n".join(lines)


def detections_to_coco(
    image_ids: np.ndarray,
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    num_detections: np.ndarray,
    image_sizes: np.ndarray,
    coco_category_ids: Sequence[int],
    *,
    valid: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """Converts a batch of post-processed detections into COCO result dicts.

    Args:
        image_ids: int array [B], the COCO image ids.
        boxes: float array [B, D, 4], normalized `[ymin, xmin, ymax, xmax]` in [0, 1] relative to
            the (resized) model input, which covers the whole original image.
        scores: float array [B, D].
        classes: int array [B, D], contiguous class indices in `[0, num_classes)`.
        num_detections: int array [B], how many of the D rows of each image are real.
        image_sizes: int array [B, 2], original `(height, width)` in pixels.
        coco_category_ids: the COCO category id of each contiguous class index (the label map).
        valid: optional bool array [B]; False marks padding images, which are dropped.

    Returns:
        A list of `{"image_id", "category_id", "bbox": [x, y, w, h], "score"}` dicts, boxes in
        original-image pixels (clipped to the image), plain Python numbers.

    Raises:
        ValueError: if a class index falls outside the label map.

    Example:
        >>> detections_to_coco(np.array([7]), np.array([[[0.1, 0.2, 0.5, 0.6]]]),
        ...                    np.array([[0.9]]), np.array([[0]]), np.array([1]),
        ...                    np.array([[100, 200]]), [18])  # doctest: +ELLIPSIS
        [{'image_id': 7, 'category_id': 18, 'bbox': [40.0, 10.0, 80.0, 40.0], 'score': 0.9...}]
    """
    image_ids = np.asarray(image_ids).reshape(-1)
    boxes = np.asarray(boxes, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    classes = np.asarray(classes).astype(np.int64)
    num_detections = np.asarray(num_detections).astype(np.int64).reshape(-1)
    image_sizes = np.asarray(image_sizes, dtype=np.float64).reshape(-1, 2)
    ids_table = np.asarray(coco_category_ids, dtype=np.int64)
    keep_image = np.ones(len(image_ids), bool) if valid is None else np.asarray(valid, bool)
    results: list[dict[str, Any]] = []
    for i in np.flatnonzero(keep_image):
        n = int(min(num_detections[i], boxes.shape[1]))
        if n <= 0:
            continue
        cls = classes[i, :n]
        if cls.min() < 0 or cls.max() >= len(ids_table):
            raise ValueError(
                f"detection class index out of range [0, {len(ids_table)}) for image "
                f"{int(image_ids[i])}: got {cls.tolist()}"
            )
        height, width = image_sizes[i]
        xywh = box_ops.boxes_to_coco(box_ops.clip(boxes[i, :n], xp=np), height, width, xp=np)
        for j in range(n):
            results.append(
                {
                    "image_id": int(image_ids[i]),
                    "category_id": int(ids_table[cls[j]]),
                    "bbox": [float(v) for v in xywh[j]],
                    "score": float(scores[i, j]),
                }
            )
    return results


def evaluate_coco(
    detections: Sequence[Mapping[str, Any]] | str | os.PathLike,
    groundtruth: Mapping[str, Any] | str | os.PathLike,
    *,
    image_ids: Sequence[int] | None = None,
    backend: str = "pycocotools",
    per_category: bool = False,
    detections_path: str | os.PathLike | None = None,
    print_fn: Callable[[str], None] | None = print,
) -> dict[str, float]:
    """Runs COCO box evaluation and returns the 12 standard numbers.

    Args:
        detections: COCO result dicts (`image_id`, `category_id`, `bbox` = `[x, y, w, h]` in
            original pixels, `score`), or the path of a JSON file holding such a list. Not
            modified.
        groundtruth: a COCO annotation dict (`images`, `annotations`, `categories`) or the path
            of an annotation JSON (e.g. `instances_val2017.json`).
        image_ids: evaluate only these images (default: every image of `groundtruth`, as the
            reference does for val2017).
        backend: "pycocotools" (the reference) or "faster" (`faster-coco-eval`, same numbers).
        per_category: also return `"AP/<category name>"`: AP@[.5:.95], all areas, 100
            detections, per category; -1.0 for a category without ground truth (the
            pycocotools convention).
        detections_path: if given, the detections are written there as JSON (atomically);
            never onto the ground truth or detections file read (`ValueError`).
        print_fn: receives the 12-line table (and the per-category lines); None prints nothing.

    Returns:
        A dict with the keys of `COCO_METRIC_NAMES` (floats; -1.0 where pycocotools has no
        ground truth for a cell), plus the per-category keys when asked for.

    Raises:
        ValueError: on an unknown backend, or detections for images absent from `groundtruth`,
            or malformed detections (an `image_id` or `category_id` that is no integer by
            build-coco's rule, `coco_integer`: 1.0 is 1, 1.9, "1" and true are refused; a
            `bbox` without 4 numbers, a NaN or infinite `bbox` or `score`: named by index and
            value), malformed ground truth likewise (ids by the same rule, an `iscrowd` other
            than 0, 1, false or true by `coco_flag`, a `bbox` that is not 4 finite numbers:
            named by list and index), a non-integer `image_ids` entry, or a `detections_path`
            that is an input.
        BadFileError: a `detections` or `groundtruth` file that is not a regular file, over
            `MAX_JSON_BYTES`, nested too deep, not JSON, not of the expected shape, or
            holding a malformed detection or ground-truth entry (the `ValueError`'s line after
            the file's name).
        ImportError: for `backend="faster"` when `faster-coco-eval` is not installed.

    Example:
        >>> gt = {"images": [{"id": 1, "width": 100, "height": 80}],
        ...       "categories": [{"id": 18, "name": "dog"}],
        ...       "annotations": [{"id": 1, "image_id": 1, "category_id": 18, "iscrowd": 0,
        ...                        "bbox": [10, 10, 40, 30], "area": 1200}]}
        >>> dets = [{"image_id": 1, "category_id": 18, "bbox": [10, 10, 40, 30], "score": 0.9}]
        >>> metrics = evaluate_coco(dets, gt, print_fn=None)
        >>> round(metrics["AP"], 6), metrics["APs"]  # one medium box found exactly
        (1.0, -1.0)
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if detections_path is not None:
        inputs = [p for p in (detections, groundtruth) if isinstance(p, str | os.PathLike)]
        check_output(detections_path, inputs=inputs, overwrite=True)
    dets = _load_detections(detections)
    gt_dict = _load_groundtruth(groundtruth)
    if detections_path is not None:
        with atomic_open(detections_path, "w", encoding="utf-8") as f:
            json.dump(dets, f)
    gt_image_ids = {img["id"] for img in gt_dict["images"]}
    unknown = sorted({d["image_id"] for d in dets} - gt_image_ids)
    if unknown:
        raise ValueError(
            f"{len(unknown)} detection image ids are not in the ground truth, e.g. {unknown[:5]}"
        )
    if image_ids is not None:
        image_ids = [_checked_id(i, f"image_ids[{k}]") for k, i in enumerate(image_ids)]
        missing = sorted(set(image_ids) - gt_image_ids)
        if missing:
            raise ValueError(f"image_ids not in the ground truth, e.g. {missing[:5]}")

    coco_eval = _run_cocoeval(dets, gt_dict, image_ids, backend)
    stats = np.asarray(coco_eval.stats, dtype=np.float64)[: len(COCO_METRIC_NAMES)]
    metrics = {name: float(v) for name, v in zip(COCO_METRIC_NAMES, stats, strict=True)}
    lines = [format_coco_table(metrics)]
    if per_category:
        per_cat = _per_category_ap(coco_eval, gt_dict)
        metrics.update({f"AP/{name}": ap for name, ap in per_cat.items()})
        width = max((len(n) for n in per_cat), default=0)
        lines += [f" AP/{name:<{width}} = {ap:0.3f}" for name, ap in per_cat.items()]
    if print_fn is not None:
        print_fn("\n".join(lines))
    return metrics


def _load_detections(
    detections: Sequence[Mapping[str, Any]] | str | os.PathLike,
) -> list[dict[str, Any]]:
    if isinstance(detections, str | os.PathLike):
        path = os.fspath(detections)
        content = read_json(path, limit=MAX_JSON_BYTES, what="detections file")
        if not isinstance(content, list):
            raise BadFileError(
                f"{path}: detections must be a list of dicts, got {type(content).__name__}"
            )
        try:
            return _load_detections(content)
        except ValueError as e:  # the file's content: a bad input file, named
            raise BadFileError(f"{path}: {e}") from None
    if not isinstance(detections, Sequence):
        raise ValueError(f"detections must be a list of dicts, got {type(detections).__name__}")
    return [_detection(index, d) for index, d in enumerate(detections)]


def _coco_id(value: Any) -> int | None:
    """`coco_integer` (the one rule for a COCO id: an int, or a float with no fraction) of a
    JSON value or of a NumPy scalar (in-memory detections and image ids), else None."""
    if isinstance(value, np.generic):
        value = value.item()
    return coco_integer(value)


def _checked_id(value: Any, where: str) -> int:
    """`value` as an id by `_coco_id`; else a `ValueError` naming `where` and the value."""
    checked = _coco_id(value)
    if checked is None:
        raise ValueError(
            f"{where} must be an integer of at most 2**53 - 1 in magnitude, got {value!r}"
        )
    return checked


def _detection(index: int, d: Any) -> dict[str, Any]:
    """Detection `index` as plain numbers: integer ids (`_checked_id`), 4 finite bbox numbers
    and a finite score; else a `ValueError` naming its index and the value."""
    try:
        bbox = [float(v) for v in d["bbox"]]
        item = {"image_id": d["image_id"], "category_id": d["category_id"], "bbox": bbox,
                "score": float(d["score"])}  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed detection {d!r:.200}: {e}") from None
    item["image_id"] = _checked_id(item["image_id"], f"detection {index}: image_id")
    where = f"detection {index} (image {item['image_id']})"
    item["category_id"] = _checked_id(item["category_id"], f"{where}: category_id")
    if len(bbox) != 4:
        raise ValueError(f"{where}: bbox must have 4 numbers [x, y, w, h], got {bbox}")
    _check_finite(index, item)
    return item


def _check_finite(index: int, item: Mapping[str, Any]) -> None:
    """Refuses a detection whose `bbox` or `score` is NaN or infinite: pycocotools' matcher
    (`if ious[d, g] < iou: continue`) takes a NaN IoU for a match, so a NaN box would score
    as a perfect one there and as nothing in faster-coco-eval."""
    for key in ("bbox", "score"):
        if not np.all(np.isfinite(item[key])):
            raise ValueError(
                f"detection {index} (image {item['image_id']}): {key} must be finite, "
                f"got {item[key]}"
            )


def _load_groundtruth(groundtruth: Mapping[str, Any] | str | os.PathLike) -> dict[str, Any]:
    if isinstance(groundtruth, str | os.PathLike):
        path = os.fspath(groundtruth)
        content = read_json(path, limit=MAX_JSON_BYTES, what="ground-truth file")
        if not isinstance(content, dict) or not all(
            isinstance(content.get(k), list) for k in ("images", "annotations", "categories")
        ):
            raise BadFileError(
                f"{path} is not a COCO annotation file: it needs the lists 'images', "
                "'annotations' and 'categories'"
            )
        try:
            return _load_groundtruth(content)
        except ValueError as e:  # the file's content: a bad input file, named
            raise BadFileError(f"{path}: {e}") from None
    missing = [k for k in ("images", "annotations", "categories") if k not in groundtruth]
    if missing:
        raise ValueError(f"ground truth is not a COCO annotation dict: missing keys {missing}")
    checked = {
        **groundtruth,
        "images": [_with_id(img, f"ground truth images[{i}]", "id")
                   for i, img in enumerate(groundtruth["images"])],
        "categories": [_with_id(cat, f"ground truth categories[{i}]", "id")
                       for i, cat in enumerate(groundtruth["categories"])],
        "annotations": [_annotation(i, a) for i, a in enumerate(groundtruth["annotations"])],
    }  # fmt: skip
    for key in ("images", "categories", "annotations"):
        _refuse_duplicate_ids(checked[key], f"ground truth {key}")
    # pycocotools records a match as the matched box's id, 0 meaning none: a box of id 0 (the
    # first box of many converters' files) was never found (perfect detections AP 0.25).
    # Boxes are known to it by id alone, so they are numbered 1.. in file order here.
    checked["annotations"] = [dict(a, id=i + 1) for i, a in enumerate(checked["annotations"])]
    return checked


def _refuse_duplicate_ids(entries: list[dict[str, Any]], where: str) -> None:
    """A `ValueError` naming the first entry whose `id` an earlier one has: pycocotools
    indexes images, categories and boxes by id, so a later one silently replaces an earlier
    one (two boxes with one id: perfect detections scored AP 0.25)."""
    seen: set[int] = set()
    for index, entry in enumerate(entries):
        entry_id = coco_integer(entry.get("id"))  # a box's own id may be absent or anything
        if entry_id is not None and entry_id in seen:
            raise ValueError(f"{where}[{index}]: duplicate id {entry_id}")
        seen.add(entry_id)


def _with_id(entry: Any, where: str, *keys: str) -> dict[str, Any]:
    """The `images` or `categories` entry (or annotation) with its `keys`, each required
    (COCOeval indexes by them), as integer ids (`_checked_id`, naming `where`)."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected an object, got {entry!r:.200}")
    out = dict(entry)
    for key in keys:
        if key not in out:
            raise ValueError(f"{where}: no {key!r} in {out!r:.200}")
        out[key] = _checked_id(out[key], f"{where}: {key}")
    return out


def _annotation(index: int, annotation: Any) -> dict[str, Any]:
    """Ground-truth annotation `index`, checked as the detections are: integer ids, `iscrowd`
    a COCO flag (`coco_flag`: 0, 1, false, true; pycocotools took `"0"` for a crowd and
    ignored the box), a `bbox` of 4 finite numbers (a NaN one was never refused), and an
    `area` (`_with_area`)."""
    where = f"ground truth annotations[{index}]"
    # its own "id" is not needed (the boxes are numbered anew: `_load_groundtruth`), as
    # build-coco, which keeps boxes without one, or of any id, does not need it
    out = _with_area(_with_id(annotation, where, "image_id", "category_id"))
    # COCO's iscrowd is optional (0, as build-coco reads it); pycocotools needs it: KeyError
    flag = coco_flag(out.get("iscrowd", 0))
    if flag is None:
        raise ValueError(f"{where}: iscrowd must be 0, 1, false or true, got {out['iscrowd']!r}")
    out["iscrowd"] = int(flag)
    if "bbox" in out:
        box = out["bbox"]
        if not _finite_numbers(box, 4):
            raise ValueError(
                f"{where}: bbox must be 4 finite numbers [x, y, w, h], got {box!r:.200}"
            )
        out["bbox"] = [float(v) for v in box]
    return out


def _finite_numbers(values: Any, count: int) -> bool:
    """Whether `values` is a list of `count` finite numbers (no bools, no strings)."""
    if not isinstance(values, list | tuple | np.ndarray) or len(values) != count:
        return False
    numbers = [v.item() if isinstance(v, np.generic) else v for v in values]
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers) and bool(
        np.all(np.isfinite(np.asarray(numbers, dtype=np.float64)))
    )


def _with_area(annotation: Mapping[str, Any]) -> dict[str, Any]:
    """The annotation, with `area` = box width x height where it has none (box-only
    annotation files leave it out; COCOeval's small / medium / large split needs it, and
    `COCO.loadRes` fills results the same way)."""
    if "area" in annotation:
        return dict(annotation)
    try:
        _, _, w, h = (float(v) for v in annotation["bbox"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"ground-truth annotation {dict(annotation)!r:.200} has no area and no "
            f"[x, y, w, h] bbox ({type(err).__name__}: {err})"
        ) from None
    return {**annotation, "area": w * h}


def _run_cocoeval(
    dets: list[dict[str, Any]],
    gt_dict: dict[str, Any],
    image_ids: Sequence[int] | None,
    backend: str,
) -> Any:
    """Builds the COCO objects and runs evaluate/accumulate/summarize quietly."""
    if backend == "faster":
        try:
            from faster_coco_eval import COCO, COCOeval_faster
        except ImportError as e:
            raise ImportError(
                "backend='faster' needs faster-coco-eval: pip install 'faster-coco-eval>=1.6'"
            ) from e

        def make_eval(gt: Any, dt: Any) -> Any:
            return COCOeval_faster(gt, dt, "bbox", print_function=lambda *a, **k: None)
    else:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval

        def make_eval(gt: Any, dt: Any) -> Any:
            return COCOeval(gt, dt, "bbox")

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = copy.deepcopy(gt_dict)
        coco_gt.createIndex()
        coco_dt = COCO()
        coco_dt.dataset = {
            "images": list(gt_dict["images"]),
            "categories": copy.deepcopy(gt_dict["categories"]),
            "annotations": _as_result_annotations(dets),
        }
        coco_dt.createIndex()
        coco_eval = make_eval(coco_gt, coco_dt)
        if image_ids is not None:
            coco_eval.params.imgIds = sorted(set(image_ids))
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return coco_eval


def _as_result_annotations(dets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `COCO.loadRes` makes of box results: area = w * h, ids from 1, not crowd."""
    anns = []
    for i, d in enumerate(dets):
        x, y, w, h = d["bbox"]
        anns.append(
            {
                **d,
                "area": w * h,
                "id": i + 1,
                "iscrowd": 0,
                "segmentation": [[x, y, x, y + h, x + w, y + h, x + w, y]],
            }
        )
    return anns


def _per_category_ap(coco_eval: Any, gt_dict: dict[str, Any]) -> dict[str, float]:
    """AP@[.5:.95], area all, 100 detections, for each category of the evaluation, by its
    name; a name two categories share is told apart by the id (`"dog (id 18)"`), where one
    category's AP replaced the other's."""
    names = {int(c["id"]): str(c.get("name", c["id"])) for c in gt_dict["categories"]}
    counts = Counter(names.values())
    keys = {i: n if counts[n] == 1 else f"{n} (id {i})" for i, n in names.items()}
    if len(set(keys.values())) < len(keys):  # a name that is another's key ("dog (id 2)")
        keys = {i: f"{n} (id {i})" for i, n in names.items()}
    names = keys
    precision = np.asarray(coco_eval.eval["precision"])  # [T, R, K, A, M]
    out = {}
    for k, cat_id in enumerate(coco_eval.params.catIds):
        p = precision[:, :, k, 0, -1]
        out[names[int(cat_id)]] = float(np.mean(p[p > -1])) if np.any(p > -1) else -1.0
    return out
