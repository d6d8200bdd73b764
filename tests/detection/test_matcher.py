"""Arg-max IoU matcher: thresholds, forced matches, invalid rows, no ground truth."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.detection import matcher
from cvbench.detection.matcher import IGNORED, UNMATCHED

pytestmark = pytest.mark.backend_agnostic


def _match(sim, valid=None, **kwargs):
    return keras.ops.convert_to_numpy(matcher.argmax_match(sim, valid, **kwargs)).tolist()


def test_thresholds_and_forced_match():
    # Rows: ground truth; columns: anchors.
    sim = np.array(
        [
            [0.7, 0.5, 0.1, 0.0],  # row 0 matches anchors 0 (0.7) and 1 (0.5 >= 0.5)
            [0.2, 0.1, 0.3, 0.49],  # row 1 best 0.49 < 0.5: only its forced match (anchor 3)
        ],
        np.float32,
    )
    assert _match(sim) == [0, 0, UNMATCHED, 1]
    assert _match(sim, force_match_for_each_row=False) == [0, 0, UNMATCHED, UNMATCHED]


def test_all_below_threshold_without_force():
    sim = np.full((2, 3), 0.2, np.float32)
    assert _match(sim, force_match_for_each_row=False) == [UNMATCHED] * 3


def test_one_ground_truth_best_for_two_anchors():
    # Anchors 0 and 1 both prefer row 1; anchor 2 prefers row 0.
    sim = np.array([[0.55, 0.6, 0.8], [0.9, 0.95, 0.1]], np.float32)
    assert _match(sim) == [1, 1, 0]


def test_forced_match_overrides_a_better_row():
    # Row 0's best anchor is 1 (0.7), row 1's is 0 (0.3). Anchor 0 prefers row 0 (0.6, a
    # match on its own), but row 1 claims it: the force wins.
    sim = np.array([[0.6, 0.7], [0.3, 0.2]], np.float32)
    assert _match(sim) == [1, 0]


def test_two_rows_claiming_the_same_anchor_lowest_row_wins():
    sim = np.array([[0.3, 0.1, 0.0], [0.4, 0.2, 0.0]], np.float32)
    # Both rows' best anchor is 0; the OD API gives it to row 0 (the lowest claiming row)
    # although row 1 overlaps it more; row 1 is left without an anchor.
    assert _match(sim) == [0, UNMATCHED, UNMATCHED]


def test_ignored_between_thresholds():
    # 0.45 in [0.4, 0.5): ignored; 0.3 < 0.4: background; 0.6 and 0.7 >= 0.5: matched.
    sim = np.array([[0.45, 0.3, 0.6, 0.7]], np.float32)
    assert _match(sim, matched_threshold=0.5, unmatched_threshold=0.4) == [IGNORED, UNMATCHED, 0, 0]


def test_invalid_rows_never_match():
    sim = np.array([[0.9, 0.9], [0.8, 0.1]], np.float32)
    valid = np.array([False, True])
    # Row 0 is padding: anchor 0 goes to row 1 (0.8); anchor 1 sees only 0.1.
    assert _match(sim, valid) == [1, UNMATCHED]


def test_no_valid_ground_truth_is_all_unmatched():
    sim = np.zeros((3, 4), np.float32)
    assert _match(sim, np.array([False, False, False])) == [UNMATCHED] * 4


def test_inputs_not_modified_and_bad_thresholds():
    sim = np.array([[0.2, 0.7]], np.float32)
    valid = np.array([True])
    sim0 = sim.copy()
    matcher.argmax_match(sim, valid)
    assert np.array_equal(sim, sim0) and valid.tolist() == [True]
    with pytest.raises(ValueError, match=r"unmatched_threshold \(0.6\) must not exceed"):
        matcher.argmax_match(sim, matched_threshold=0.5, unmatched_threshold=0.6)


def test_match_boxes_uses_iou_and_skips_degenerate_rows():
    anchors = np.array([[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0], [0.0, 0.5, 0.5, 1.0]])
    gt = np.array([[0.0, 0.0, 0.5, 0.4], [0.7, 0.7, 0.7, 0.9]], np.float32)  # row 1: zero height
    # IoU(row 0, anchor 0) = 0.2 / 0.25 = 0.8; the degenerate row matches nothing.
    out = keras.ops.convert_to_numpy(matcher.match_boxes(gt, anchors)).tolist()
    assert out == [0, UNMATCHED, UNMATCHED]


def test_sentinel_values_are_the_od_api_ones():
    # UNMATCHED -1 and IGNORED -2 (the OD API's values): negative, so never a row index, and
    # distinct, so the target encoder can tell background (class loss) from ignored (none).
    assert (UNMATCHED, IGNORED) == (-1, -2)
    sim = np.array([[0.45, 0.3, 0.6, 0.7]], np.float32)  # as in test_ignored_between_thresholds
    out = matcher.argmax_match(sim, unmatched_threshold=0.4)
    assert keras.ops.convert_to_numpy(out).tolist() == [-2, -1, 0, 0]
    assert keras.ops.dtype(out) == "int32"


def test_value_exactly_at_the_unmatched_threshold_is_ignored():
    # "Below the unmatched threshold" is strict: 0.25 at unmatched_threshold 0.25 is IGNORED,
    # 0.125 is UNMATCHED, 0.375 IGNORED, 0.5 at matched_threshold 0.5 a match (all exact in
    # binary, so float32 rounding cannot move them across a threshold).
    sim = np.array([[0.25, 0.125, 0.375, 0.5]], np.float32)
    kwargs = {"matched_threshold": 0.5, "unmatched_threshold": 0.25}
    assert _match(sim, force_match_for_each_row=False, **kwargs) == [IGNORED, UNMATCHED, IGNORED, 0]
    # Row 0's forced match is its best column, 3: nothing changes.
    assert _match(sim, **kwargs) == [IGNORED, UNMATCHED, IGNORED, 0]


def test_a_single_anchor_column():
    # One anchor, two rows (valid_rows None: both valid). By IoU it goes to row 1 (0.6 >= 0.5);
    # with the forced matches both rows claim it (their only column) and the lowest row wins.
    sim = np.array([[0.3], [0.6]], np.float32)
    assert _match(sim, force_match_for_each_row=False) == [1]
    assert _match(sim) == [0]


def test_invalid_rows_never_match_whatever_the_similarity_and_thresholds():
    # Similarities need not be IoUs: with negative ones and thresholds, a padding row must
    # still lose to every valid row and match nothing itself.
    # Column 0: the only valid row (1) has -3.0 < -2.0 -> UNMATCHED; column 1: -0.5 >= -1.0 ->
    # row 1.
    sim = np.array([[0.0, 0.0], [-3.0, -0.5]], np.float32)
    kwargs = {"matched_threshold": -1.0, "unmatched_threshold": -2.0}
    valid = np.array([False, True])
    assert _match(sim, valid, force_match_for_each_row=False, **kwargs) == [UNMATCHED, 1]
    # No valid row at all: every column UNMATCHED even with thresholds of -1.
    none_valid = np.array([False, False])
    assert (
        _match(sim, none_valid, matched_threshold=-1.0, unmatched_threshold=-1.0) == [UNMATCHED] * 2
    )


def test_match_boxes_defaults_with_a_degenerate_first_row():
    anchors = np.array(
        [[0.0, 0.0, 0.5, 0.5], [0.0, 0.1, 0.5, 0.6], [0.5, 0.5, 1.0, 1.0], [0.5, 0.0, 1.0, 0.5]],
        np.float32,
    )
    gt = np.array(
        [
            [0.25, 0.25, 0.25, 0.25],  # row 0: a point (invalid), first: it would win every tie
            [0.0, 0.0, 0.5, 0.5],  # row 1: anchor 0 itself (IoU 1)
            [0.5, 0.5, 0.9, 0.75],  # row 2: best anchor 2 with IoU 0.1 / 0.25 = 0.4
        ],
        np.float32,
    )
    # Defaults (0.5, 0.5, forced matches, validity from the area):
    # anchor 0: row 1 (IoU 1); anchor 1: row 1 by the threshold, IoU 0.5 * 0.4 / (0.25 + 0.25 -
    # 0.2) = 2/3 >= 0.5; anchor 2: row 2 only by its forced match (0.4 < 0.5); anchor 3
    # overlaps nothing: UNMATCHED. The point never claims anchor 0 (its argmax over zeros).
    out = keras.ops.convert_to_numpy(matcher.match_boxes(gt, anchors)).tolist()
    assert out == [1, 1, 2, UNMATCHED]
