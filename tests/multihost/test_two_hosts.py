"""Horovod over two hosts for real: hostA and hostB are network namespaces of this machine
joined by a veth pair, each with its own sshd (conftest.py, hosts.py); horovodrun runs on
hostA and starts hostB's ranks over ssh; Gloo talks over the veth (slow).

The commands (`<tmp>` the test's folder, `<key>` the fixture's ssh key):

    horovodrun -np 4 -H hostA:2,hostB:2 --gloo --network-interface cvb0 --ssh-port 22 \\
        --ssh-identity-file <key> python tests/multihost/rank_worker.py <tmp>/records <tmp>
    horovodrun -np 4 -H hostA:2,hostB:2 --gloo --network-interface cvb0 --ssh-port 22 \\
        --ssh-identity-file <key> cvbench train --model resnet18 --image-size 32 \\
        --data-dir <tmp>/records --num-classes 16 --batch-size 2 --epochs 1 ...
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]
HOROVODRUN = Path(sys.executable).with_name("horovodrun")
CVBENCH = Path(sys.executable).with_name("cvbench")
sys.path.insert(0, str(HERE))

import rank_worker  # noqa: E402


def job_env() -> dict[str, str]:
    """What every rank gets: horovodrun's Gloo launch forwards this environment over ssh."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2",
                PYTHONUNBUFFERED="1", PYTHONPATH=path)  # fmt: skip


def horovodrun(hosts, np_: int = 4) -> list[str]:
    a, b = hosts.names
    return [str(HOROVODRUN), "-np", str(np_), "-H", f"{a}:2,{b}:2", "--gloo",
            "--network-interface", hosts.iface, *hosts.ssh_args()]  # fmt: skip


def weights(path: Path) -> list[np.ndarray]:
    data = np.load(path)
    names = sorted((k for k in data.files if k.startswith("arr_")), key=lambda k: int(k[4:]))
    return [data[k] for k in names]


@pytest.mark.slow
def test_four_ranks_on_two_hosts_shard_once_and_equal_one_process(two_hosts, tmp_path):
    if not HOROVODRUN.exists():
        pytest.fail(f"no horovodrun next to {sys.executable} (make setup builds Horovod)")
    records = rank_worker.write_records(tmp_path / "records")
    command = [*horovodrun(two_hosts), sys.executable, str(HERE / "rank_worker.py"),
               str(records), str(tmp_path)]  # fmt: skip
    run = two_hosts.run(command, capture_output=True, text=True, env=job_env(), timeout=600,
                        cwd=tmp_path)  # fmt: skip
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    one = subprocess.run([sys.executable, str(HERE / "rank_worker.py"), "reference", str(records),
                          str(tmp_path), "4"], capture_output=True, text=True, env=job_env(),
                         timeout=300)  # fmt: skip
    assert one.returncode == 0, one.stderr[-3000:]
    host_a, host_b = ("hostA", "hostB") if two_hosts.namespaced else (None, None)
    # Ranks 0-1 on the first host, 2-3 on the second (horovodrun fills hosts in -H order),
    # each host's ranks with local ranks 0 and 1; every rank names its host in its own line.
    assert [r["size"] for r in ranks] == [4, 4, 4, 4]
    assert [r["local_rank"] for r in ranks] == [0, 1, 0, 1]
    if two_hosts.namespaced:
        assert [r["host"] for r in ranks] == [host_a, host_a, host_b, host_b]
        assert ranks[0]["hosts"] == [host_a, host_a, host_b, host_b]
        for r, host in enumerate([host_a, host_a, host_b, host_b]):
            line = f"[{r}]<stdout>:cvbench: rank {r} of 4 on host {host}, local rank {r % 2} of 2"
            assert line in run.stdout.splitlines(), run.stdout[-3000:]
    # Training: 4 files over 4 ranks, one file each (by-file sharding): 16 records, each
    # read by exactly one rank in the epoch.
    train = [sorted(r["train_labels"]) for r in ranks]
    assert sorted(sum(train, [])) == list(range(16))
    assert train == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    # Validation: 10 records in contiguous ranges, rank r gets [10r // 4, 10(r + 1) // 4):
    # [0, 2), [2, 5), [5, 7), [7, 10); each record evaluated exactly once.
    val = [r["val_labels"] for r in ranks]
    assert val == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    # 4 ranks x batch 3 = 1 process x batch 12: 48 rows -> 4 steps an epoch, 2 epochs.
    reference = weights(tmp_path / "reference.npz")
    assert int(np.load(tmp_path / "reference.npz")["step"]) == 8
    worst = 0.0
    for r in range(4):
        assert int(np.load(tmp_path / f"rank{r}.npz")["step"]) == 8
        for got, want in zip(weights(tmp_path / f"rank{r}.npz"), reference, strict=True):
            worst = max(worst, float(np.max(np.abs(got - want))))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    print(f"largest |4 ranks x 3 - 1 process x 12| over all weights: {worst:.3g}")
    # The evaluation over 4 shards (totals summed over ranks) is the one-process evaluation
    # of all 10 records, on every rank.
    single = json.loads((tmp_path / "reference.json").read_text())
    for r in ranks:
        assert r["evaluation"] == ranks[0]["evaluation"]
        assert set(r["evaluation"]) == set(single)
        for key, value in single.items():
            assert r["evaluation"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


@pytest.mark.slow
def test_cvbench_train_over_two_hosts_scales_the_recipe_and_writes_once(two_hosts, tmp_path):
    if not HOROVODRUN.exists():
        pytest.fail(f"no horovodrun next to {sys.executable} (make setup builds Horovod)")
    records = rank_worker.write_records(tmp_path / "records")
    run_dir = tmp_path / "run"
    command = [*horovodrun(two_hosts), str(CVBENCH), "train", "--model", "resnet18",
               "--image-size", "32", "--data-dir", str(records), "--num-classes", "16",
               "--batch-size", "2", "--epochs", "1", "--eval", "end", "--no-export",
               "--no-progress", "--log-every", "1", "--log-dir", str(run_dir)]  # fmt: skip
    run = two_hosts.run(command, capture_output=True, text=True, env=job_env(), timeout=600,
                        cwd=tmp_path)  # fmt: skip
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    # Global batch 4 ranks x 2 = 8; 16 training records / 8 = 2 steps per epoch; the
    # resnet18 recipe's rate 0.256 per 256 images, linearly scaled: 0.256 x 8 / 256 = 0.008.
    # Printed once, by rank 0.
    banner = [x for x in run.stdout.splitlines() if "cvbench: recipe" in x]
    assert len(banner) == 1 and banner[0].startswith("[0]<stdout>:"), banner
    assert (
        "global batch 8 = 4 x 2, peak LR 0.008 (0.256 x 8 / 256), 2 steps per epoch, 2 steps"
        in banner[0]
    )
    if two_hosts.namespaced:
        for r, host in enumerate(["hostA", "hostA", "hostB", "hostB"]):
            assert f"[{r}]<stdout>:cvbench: rank {r} of 4 on host {host}," in run.stdout
    events = [json.loads(x) for x in (run_dir / "train_log.jsonl").read_text().splitlines()]
    (start,) = [e for e in events if e["event"] == "start"]
    assert (start["ranks"], start["global_batch"]) == (4, 8)
    # One set of checkpoints and logs, rank 0's: every output line of the run's results and
    # every checkpoint comes from one writer.
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["ckpt-0000000002.npz"], checkpoints
    results = [x for x in run.stdout.splitlines() if re.search(r"<stdout>:top1: ", x)]
    assert len(results) == 1 and results[0].startswith("[0]<stdout>:"), results
