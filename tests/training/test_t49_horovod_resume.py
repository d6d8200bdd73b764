"""Two Horovod ranks: an epoch resumed part-way ends with the record (loss and accuracy, the
mean over ranks of each rank's means) of the uninterrupted run, exactly: each rank resumes
from its own sums of the steps before the stop (slow: two processes under horovodrun,
`test_t49_horovod_worker.py`)."""

import json
from pathlib import Path

import pytest
from training_helpers import run_two_ranks

from cvbench.training.epoch_loop import RANK_SUMS

WORKER = Path(__file__).with_name("test_t49_horovod_worker.py")


@pytest.mark.slow
def test_a_resumed_epoch_under_horovod_records_what_the_uninterrupted_one_does(tmp_path):
    run = run_two_ranks(WORKER, tmp_path, extra_path=Path(__file__).parent)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for record in records:
        # The run was cut after step 3 of epoch 1 (4 steps): the resumed fit records epoch 1
        # (resumed part-way) and epoch 2, as the uninterrupted fit did.
        assert set(record["resumed"]) == {"loss", "accuracy"}
        assert record["resumed"] == record["full"]
    # The ranks' sums before the stop differ (each rank its own shard): resuming every rank
    # from rank 0's would have changed the record.
    state = records[0]["state"]
    assert state["batch_in_epoch"] == 3 and state["ranks"] == 2
    assert state[RANK_SUMS][0] == state["epoch_sums"]
    assert state[RANK_SUMS][0]["loss"] != state[RANK_SUMS][1]["loss"]
