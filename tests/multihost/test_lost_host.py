"""A host lost in the middle of a two-host run (slow): every process of hostB (its sshd and
ranks 2 and 3) is SIGKILLed mid-epoch, as when a machine loses power. The ranks on hostA must
stop soon with a message naming what was lost, the job must end non-zero, and rank 0's
checkpoints (on hostA) must stay intact.

The command (on hostA; `<key>` the fixture's ssh key, `<tmp>` the test's folder):

    horovodrun -np 4 -H hostA:2,hostB:2 --gloo --network-interface cvb0 --ssh-port 22 \\
        --ssh-identity-file <key> cvbench train --model resnet18 --image-size 32 \\
        --data-dir <tmp>/records --num-classes 16 --batch-size 2 --epochs 6 \\
        --checkpoint-every 1 --eval none --no-export --no-progress --log-every 1 \\
        --log-dir <tmp>/run

then, on hostA alone, the same `cvbench train ... --resume` under
`horovodrun -np 2 -H hostA:2 --gloo`: the run continues on 2 ranks
from the last checkpoint (no `--force-resume`: only the world size changed) and ends at the
planned number of images.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import rank_worker  # noqa: E402
from test_two_hosts import CVBENCH, HOROVODRUN, horovodrun, job_env  # noqa: E402

TRAIN = ["--model", "resnet18", "--image-size", "32", "--num-classes", "16", "--batch-size",
         "2", "--checkpoint-every", "1", "--eval", "none", "--no-export", "--no-progress",
         "--log-every", "1"]  # fmt: skip


@pytest.mark.slow
def test_a_lost_host_stops_the_other_within_60_s_and_one_host_resumes_to_the_planned_images(
    two_hosts, tmp_path
):
    if not two_hosts.namespaced:
        pytest.skip(f"losing a whole host needs its own namespace: {two_hosts.reason}")
    if not HOROVODRUN.exists():
        pytest.fail(f"no horovodrun next to {sys.executable} (make setup builds Horovod)")
    from cvbench.training.checkpoint import CheckpointManager, load_checkpoint

    records = rank_worker.write_records(tmp_path / "records")
    run_dir = tmp_path / "run"
    command = [*horovodrun(two_hosts), str(CVBENCH), "train", *TRAIN, "--data-dir",
               str(records), "--epochs", "6", "--log-dir", str(run_dir)]  # fmt: skip
    log_path = tmp_path / "job.log"
    with open(log_path, "w") as log:
        job = two_hosts.popen(command, stdout=log, stderr=subprocess.STDOUT, env=job_env(),
                              cwd=tmp_path)  # fmt: skip
        # 16 records / global batch 8 = 2 steps an epoch: step 3 is the middle of epoch 2.
        wanted = run_dir / "checkpoints" / "ckpt-0000000003.npz"
        deadline = time.time() + 400
        while not wanted.exists() and job.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert wanted.exists(), log_path.read_text()[-4000:]
        killed_at = time.time()
        killed = two_hosts.kill_host("hostB")
        try:
            status = job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
            pytest.fail(f"hostA's ranks still ran 120 s after hostB was lost: {log_path}")
        stopped_after = time.time() - killed_at
    text = log_path.read_text()
    print(
        f"hostB lost ({len(killed)} processes SIGKILLed); the job ended {stopped_after:.1f} s "
        f"later with exit status {status}"
    )
    assert len(killed) >= 3  # hostB's sshd and ranks 2 and 3 (and their ssh sessions)
    assert status != 0
    assert stopped_after < 60, text[-4000:]
    assert "epoch 6:" not in text  # it did not train on to the end
    lines = [x for x in text.splitlines() if "another rank failed or exited" in x]
    print("\n".join(lines))
    # A survivor (rank 0 or 1: horovodrun ends the other once one fails) names what it lost;
    # hostA's other rank may be gone already, so it may be named too.
    assert any(", lost " in x and "ranks 2, 3 on host hostB (10.27.0.2)" in x for x in lines), text[
        -4000:
    ]
    deadline = time.time() + 10  # the killed ranks' exits may still be collected
    while ranks_left_on_host_a(two_hosts) and time.time() < deadline:
        time.sleep(0.2)
    assert not ranks_left_on_host_a(two_hosts)
    # Every checkpoint rank 0 kept loads completely (CRC and SHA-256 checked); the newest is
    # at step 3 or later, mid-run.
    manager = CheckpointManager(run_dir / "checkpoints")
    for path in manager.checkpoints():
        load_checkpoint(path)
    newest, meta, _ = manager.latest()
    lost_at = meta["state"]["step"]
    assert 3 <= lost_at < 12 and meta["state"]["global_batch"] == 8

    # Restart on the host left: 2 ranks. The recipe's rule at the new world size: global batch
    # 2 x 2 = 4, peak LR 0.256 x 4 / 256 = 0.004, 16 records / 4 = 4 steps per epoch, 6 epochs
    # = 24 steps = 96 images, the 12 x 8 planned at 4 ranks; step S at batch 8 is step 2S.
    a = two_hosts.names[0]
    # (one host: horovodrun runs every rank locally over loopback, no --network-interface)
    resume = [str(HOROVODRUN), "-np", "2", "-H", f"{a}:2", "--gloo", str(CVBENCH), "train",
              *TRAIN, "--data-dir", str(records), "--epochs", "6", "--log-dir", str(run_dir),
              "--resume"]  # fmt: skip
    resumed = two_hosts.run(resume, capture_output=True, text=True, env=job_env(), timeout=600,
                            cwd=tmp_path)  # fmt: skip
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-4000:]
    said = (
        f"[0]<stdout>:cvbench: resumed from {newest} (step {lost_at} at 4 ranks, global batch "
        f"8: {8 * lost_at} images) on 2 ranks: global batch 4, step {2 * lost_at} of 24 (96 "
        "images planned)"
    )
    assert said in resumed.stdout.splitlines(), out[-4000:]
    print(said)
    banner = [x for x in resumed.stdout.splitlines() if "cvbench: recipe" in x]
    assert len(banner) == 1, banner
    assert (
        "global batch 4 = 2 x 2, peak LR 0.004 (0.256 x 4 / 256), 4 steps per epoch, 24 steps"
        in banner[0]
    )
    events = [json.loads(x) for x in (run_dir / "train_log.jsonl").read_text().splitlines()]
    starts = [e for e in events if e["event"] == "start"]
    assert [(e["ranks"], e["global_batch"]) for e in starts] == [(4, 8), (2, 4)]
    (change,) = [e for e in events if e["event"] == "world_size"]
    assert (change["ranks_before"], change["ranks"], change["step"]) == (4, 2, 2 * lost_at)
    final, meta, _ = CheckpointManager(run_dir / "checkpoints").latest()
    seen = meta["state"]["step"] * meta["state"]["global_batch"]
    print(f"resumed on 2 ranks from step {lost_at}; ended at step {meta['state']['step']} x "
          f"global batch {meta['state']['global_batch']} = {seen} images (96 planned)")  # fmt: skip
    assert (meta["state"]["step"], meta["state"]["global_batch"], seen) == (24, 4, 96)


def ranks_left_on_host_a(two_hosts) -> dict[int, str]:
    """Live processes in hostA's namespace besides its sshd, with their command lines (its
    ranks must all be gone)."""
    sshd = two_hosts._sshd["hostA"].pid
    left = {}
    for pid in two_hosts["hostA"].pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if pid != sshd and state != "Z" and not cmdline.startswith(("/usr/sbin/sshd", "sshd")):
            left[pid] = cmdline[:300]
    return left
