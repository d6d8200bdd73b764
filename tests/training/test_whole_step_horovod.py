"""Whole-step semantics under Horovod: a non-finite step on one rank is skipped on every rank
(slow: two processes under horovodrun, `whole_step_worker.py`)."""

from pathlib import Path

import numpy as np
import pytest
from training_helpers import run_two_ranks

WORKER = Path(__file__).with_name("whole_step_worker.py")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:precision mixed_float16 without a GPU")
def test_a_non_finite_batch_on_one_rank_skips_the_step_on_every_rank(tmp_path):
    run = run_two_ranks(WORKER, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for precision, scale in (("float32", -1.0), ("mixed_float16", 512.0)):
        ranks = [np.load(tmp_path / f"{precision}-rank{r}.npz") for r in (0, 1)]
        for data in ranks:
            # Rank 0's batch was finite: it skips because the averaged gradients are not.
            assert data["skipped"].tolist() == [0.0, 0.0, 1.0, 0.0]
            assert data["changed"].tolist() == []  # no variable changed in the skipped step
            assert (int(data["skipped_steps"]), int(data["iterations"])) == (1, 3)
            assert float(data["loss_scale"]) == scale
            assert bool(data["moving_finite"])
        arrays = sorted(
            (k for k in ranks[0].files if k.startswith("arr_")), key=lambda k: int(k[4:])
        )
        for key in arrays:
            np.testing.assert_array_equal(ranks[0][key], ranks[1][key])
