"""COCO evaluation under two real Horovod ranks (horovodrun, Gloo, CPU): slow.

The test runs this file as the worker script: each rank reads its share of the validation
records (Horovod's rank and size are the pipeline's defaults), an oracle model detects the
ground truth, detections are gathered to rank 0 for COCOeval and the numbers broadcast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

HOROVODRUN = Path(sys.executable).with_name("horovodrun")
ENV = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def worker(data_root: Path, out: Path) -> None:
    """One rank: evaluate with the oracle, record the ids this rank read and the metrics."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_task import OracleModel, _task  # the single-process tests' helpers

    from cvbench.data.read.coco import coco_dataset
    from cvbench.training.distributed import Horovod

    dist = Horovod()
    records, ann_path = data_root / "records", data_root / "instances_val.json"
    task = _task(str(records), annotations_file=ann_path)
    oracle = OracleModel(task, json.loads(ann_path.read_text()))
    # The pipeline's defaults are Horovod's size and rank.
    seen = []
    for _, meta in coco_dataset(records, "val", batch_size=1, image_size=128, training=False):
        seen += meta["image_id"].numpy()[meta["valid"].numpy()].tolist()
    trainer = SimpleNamespace(model=oracle, distribution=dist)
    metrics = task.evaluate(trainer, batch_size=1)
    result = {"rank": dist.rank, "size": dist.size, "seen": seen, "metrics": metrics}
    (out / f"rank{dist.rank}.json").write_text(json.dumps(result))


@pytest.mark.slow
def test_two_horovod_ranks_evaluate_every_image_once(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_task import _tiny_coco

    _tiny_coco(tmp_path)
    run = subprocess.run(
        [str(HOROVODRUN), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, __file__,
         str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, env=ENV, timeout=400,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["size"] for r in ranks] == [2, 2]
    # 4 validation records in contiguous ranges: ids 1-2 on rank 0, 3-4 on rank 1.
    assert ranks[0]["seen"] == [1, 2] and ranks[1]["seen"] == [3, 4]
    # Both ranks report rank 0's COCOeval over all four images: the oracle is perfect.
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    assert abs(ranks[0]["metrics"]["AP"] - 1.0) < 1e-9
    assert "Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all" in run.stdout


if __name__ == "__main__":
    worker(Path(sys.argv[1]), Path(sys.argv[2]))
