"""`cvbench.data.read.ranks`: one TensorFlow-free home of the rank rules that the tf.data
reader, DALI and grain share (seed per rank, record range per rank, evaluation steps)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cvbench.data.read.ranks import eval_steps, eval_steps_of, rank_range, rank_seed


def test_rank_seed_is_seed_sequence_of_seed_and_rank():
    # The formula the grain copy and the tf.data reader both used: SeedSequence([seed, rank]).
    expected = int(np.random.SeedSequence([7, 2]).generate_state(1)[0])
    assert rank_seed(7, 2) == expected
    assert rank_seed(None, 2) is None


@pytest.mark.parametrize("total,shards", [(10, 3), (3, 4), (0, 2), (7, 1)])
def test_rank_ranges_partition_the_records(total, shards):
    ranges = [rank_range(total, shards, r) for r in range(shards)]
    covered = [i for lo, hi in ranges for i in range(lo, hi)]
    assert covered == list(range(total))  # each record once, in order
    sizes = [hi - lo for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1


def test_eval_steps_of_is_the_largest_ranks_batches():
    # 10 records, 3 ranks: 3, 3, 4 records -> ceil(4 / 2) = 2 batches of 2 on every rank.
    assert eval_steps_of(10, 3, 2) == 2 == eval_steps(4, 2)
    # 9 records, 2 ranks: 4, 5 -> ceil(5 / 4) = 2.
    assert eval_steps_of(9, 2, 4) == 2


def test_the_readers_use_the_one_home():
    from cvbench.data.dali import pipeline as dali_pipeline
    from cvbench.data.grain import dataset as grain_dataset
    from cvbench.data.read import reader

    assert reader.rank_seed is rank_seed and reader.eval_steps is eval_steps
    assert grain_dataset.rank_seed is rank_seed and grain_dataset.rank_range is rank_range
    assert dali_pipeline.rank_seed is rank_seed


def test_reader_segments_follow_rank_range():
    from cvbench.data.read.reader import rank_segments

    # counts [3, 4] = 7 records, 3 ranks: [0, 2), [2, 4), [4, 7).
    segs = [rank_segments(["a", "b"], [3, 4], 3, r) for r in range(3)]
    assert [[(s.path, s.skip, s.take) for s in rank] for rank in segs] == [
        [("a", 0, 2)],
        [("a", 2, 1), ("b", 0, 1)],
        [("b", 1, 3)],
    ]


def test_ranks_import_without_tensorflow(tmp_path):
    blocker = tmp_path / "no_tf" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no TensorFlow here')\n")
    code = textwrap.dedent(
        """
        import sys
        from cvbench.data.read.ranks import rank_seed, rank_range
        import cvbench.data.grain.dataset as g
        assert g.rank_seed is rank_seed and "tensorflow" not in sys.modules
        print(rank_range(10, 3, 2))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(blocker.parent), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "(6, 10)"
