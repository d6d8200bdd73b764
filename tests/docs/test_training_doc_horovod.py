"""docs/training.md's quick start under `horovodrun -np 2`: its steps per epoch come from the
global batch (slow: horovodrun).

Regression: the example hard-coded `steps_per_epoch=5004`, one GPU's count of 1,281,167 //
256; every rank of an 8-rank run then trained 5004 steps per epoch, 8x the data. The block
runs as the docs harness runs it (same substitutions, tiny records: 12 training images), with
two Gloo ranks of batch 2: 12 // (2 x 2) = 3 steps per epoch, where one process has 6.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_blocks import parse_markdown
from docs_commands import ROOT
from docs_exercise import prepare

HOROVODRUN = Path(sys.executable).with_name("horovodrun")
ENV = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
REPORT = """
import json as _json
_json.dump(
    {"size": trainer.size, "steps_per_epoch": steps_per_epoch, "step": trainer.state["step"]},
    open(f"rank{trainer.rank}.json", "w"),
)
"""


def _quick_start():
    blocks = [b for b in parse_markdown(ROOT / "docs" / "training.md") if "Trainer(" in b.text]
    return next(b for b in blocks if "steps_per_epoch = num_examples(" in b.text)


@pytest.mark.slow
def test_quick_start_steps_per_epoch_follow_the_ranks(tmp_path, doc_data):
    block = _quick_start()
    assert "5004," not in block.text  # the hard-coded one-GPU count is gone
    script = tmp_path / "quick_start.py"
    script.write_text(prepare(block, block.substituted(), tmp_path, doc_data) + REPORT)
    run = subprocess.run(
        [str(HOROVODRUN), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(script)],
        capture_output=True, text=True, env=ENV, timeout=500, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    # 12 training images // (batch 2 x 2 ranks) = 3 steps per epoch on each rank; 1 epoch.
    assert ranks == [{"size": 2, "steps_per_epoch": 3, "step": 3}] * 2
