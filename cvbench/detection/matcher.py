"""Arg-max IoU matching of anchors to ground truth (the TF OD API `ArgMaxMatcher`).

For every anchor (a column of the IoU matrix) take the ground-truth row with the highest
IoU `v`:

- `v >= matched_threshold`: the anchor is matched to that row;
- `v < unmatched_threshold`: `UNMATCHED` (a background anchor);
- otherwise `IGNORED` (no loss at all; empty when both thresholds are 0.5, as in SSD320).

Then, with `force_match_for_each_row`, every valid ground-truth row claims its own best
anchor whatever the IoU, overriding the rule above; when two rows share a best anchor the
lower row index wins (as `argmax` over the rows in the OD API). Ties in any `argmax` go to
the lowest index.

Invalid rows (padding, degenerate boxes: see `valid_rows`) never match anything. With no
valid row at all every anchor is `UNMATCHED`. Inputs are never modified.
"""

from __future__ import annotations

from typing import Any

import keras

from cvbench.detection import box_ops

#: Match value of an anchor whose best IoU is below the unmatched threshold (background).
UNMATCHED = -1
#: Match value of an anchor between the thresholds: no classification or box loss.
IGNORED = -2

Array = Any


def argmax_match(
    similarity: Array,
    valid_rows: Array | None = None,
    *,
    matched_threshold: float = 0.5,
    unmatched_threshold: float = 0.5,
    force_match_for_each_row: bool = True,
    xp: Any = keras.ops,
) -> Array:
    """Matches columns (anchors) to rows (ground truth) of a similarity matrix.

    Args:
        similarity: `(M, N)` float similarities, e.g. `box_ops.iou(gt_boxes, anchors)` with
            `M >= 1` ground-truth rows (pad with an invalid row when there are none).
        valid_rows: `(M,)` booleans, False for rows that must never match (padding);
            `None`: all rows are valid.
        matched_threshold: lowest similarity of a match.
        unmatched_threshold: similarities below it are `UNMATCHED`; must not exceed
            `matched_threshold`.
        force_match_for_each_row: let every valid row claim its best column.
        xp: array namespace (see `box_ops`).

    Returns:
        `(N,)` int32: the matched row index, `UNMATCHED` or `IGNORED` for every column.

    Raises:
        ValueError: if `unmatched_threshold > matched_threshold`.
    """
    if unmatched_threshold > matched_threshold:
        raise ValueError(
            f"unmatched_threshold ({unmatched_threshold!r}) must not exceed "
            f"matched_threshold ({matched_threshold!r})"
        )
    if valid_rows is None:
        valid_rows = xp.ones_like(similarity[:, 0]) > 0
    # Invalid rows sit below every similarity and every threshold (not just below IoUs: a
    # fill of -1 lost to valid rows under -1 and matched at thresholds <= -1).
    masked = xp.where(valid_rows[:, None], similarity, float("-inf"))
    best_row = xp.cast(xp.argmax(masked, axis=0), "int32")
    best_value = xp.max(masked, axis=0)
    unmatched = xp.full_like(best_row, UNMATCHED)
    ignored = xp.full_like(best_row, IGNORED)
    matches = xp.where(
        best_value >= matched_threshold,
        best_row,
        xp.where(best_value < unmatched_threshold, unmatched, ignored),
    )
    if not force_match_for_each_row:
        return matches
    num_columns = similarity.shape[1]
    best_column = xp.argmax(masked, axis=1)  # (M,)
    # claims[i, j] = 1 where valid row i claims column j.
    claims = xp.one_hot(best_column, num_columns) * xp.cast(valid_rows, "float32")[:, None]
    claimed_by = xp.cast(xp.argmax(claims, axis=0), "int32")  # lowest claiming row
    is_claimed = xp.max(claims, axis=0) > 0
    return xp.where(is_claimed, claimed_by, matches)


def match_boxes(
    gt_boxes: Array,
    anchors: Array,
    valid_rows: Array | None = None,
    *,
    matched_threshold: float = 0.5,
    unmatched_threshold: float = 0.5,
    force_match_for_each_row: bool = True,
    xp: Any = keras.ops,
) -> Array:
    """IoU matching of anchors to ground-truth boxes (`argmax_match` of their IoU).

    Args:
        gt_boxes: `(M, 4)` ground truth, `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]`,
            `M >= 1` (both box arrays are cast to float32).
        anchors: `(N, 4)` anchors, same format.
        valid_rows: `(M,)` booleans (see `argmax_match`); `None`: rows with a positive area.
        matched_threshold: see `argmax_match`.
        unmatched_threshold: see `argmax_match`.
        force_match_for_each_row: see `argmax_match`.
        xp: array namespace (see `box_ops`).

    Returns:
        `(N,)` int32 matched row, `UNMATCHED` or `IGNORED` per anchor.
    """
    gt_boxes = xp.cast(gt_boxes, "float32")
    anchors = xp.cast(anchors, "float32")
    if valid_rows is None:
        valid_rows = box_ops.is_valid(gt_boxes, xp=xp)
    return argmax_match(
        box_ops.iou(gt_boxes, anchors, xp=xp),
        valid_rows,
        matched_threshold=matched_threshold,
        unmatched_threshold=unmatched_threshold,
        force_match_for_each_row=force_match_for_each_row,
        xp=xp,
    )
