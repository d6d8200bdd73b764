"""`read_run_history` after a resume on another number of ranks: steps compared in images
(the review's finding: a resume at global batch 8 from step 8 of global batch 4, step 4 in
the new count, dropped the first session's steps 5-8 and its epoch record)."""

from __future__ import annotations

import json

import pytest

from cvbench.training.run_log import read_run_history

pytestmark = pytest.mark.backend_agnostic


def history(tmp_path, events):
    path = tmp_path / "train_log.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return [(e["event"], e.get("step"), e.get("epoch")) for e in read_run_history(path)]


def steps(first, last, epoch=0):
    return [{"event": "step", "step": s, "epoch": epoch} for s in range(first, last + 1)]


def test_a_resume_at_a_larger_global_batch_keeps_the_earlier_history(tmp_path):
    events = [
        {"event": "start", "global_batch": 4, "resumed_step": 0, "resumed_epoch": 0},
        *steps(1, 8),
        {"event": "epoch", "step": 8, "epoch": 1},
        # checkpoint of step 8 (32 images, epoch 1 done) resumed at global batch 8: step 4
        {"event": "start", "global_batch": 8, "resumed_step": 4, "resumed_epoch": 1},
        *steps(5, 8, epoch=1),
    ]
    kept = history(tmp_path, events)
    assert [s for k, s, _ in kept if k == "step"] == [1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8]
    assert ("epoch", 8, 1) in kept


def test_a_resume_at_a_smaller_global_batch_drops_what_it_makes_again(tmp_path):
    events = [
        {"event": "start", "global_batch": 8, "resumed_step": 0, "resumed_epoch": 0},
        *steps(1, 4),
        {"event": "epoch", "step": 4, "epoch": 1},
        # killed after the checkpoint of step 2 (16 images): resumed at global batch 4, step 4
        {"event": "start", "global_batch": 4, "resumed_step": 4, "resumed_epoch": 0},
        *steps(5, 8),
        {"event": "epoch", "step": 8, "epoch": 1},
    ]
    kept = history(tmp_path, events)
    # steps 3 and 4 of global batch 8 (24 and 32 images) and the epoch record: made again
    assert [s for k, s, _ in kept if k == "step"] == [1, 2, 5, 6, 7, 8]
    assert [e for e in kept if e[0] == "epoch"] == [("epoch", 8, 1)]
