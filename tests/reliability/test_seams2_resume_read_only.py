"""A resume at an epoch boundary from a read-only checkpoint folder trains, and fails only
at the first checkpoint it must write, naming that new file: the checkpoint it resumed
from is never rewritten (it was, the every-N rule having written it before the epoch's
end). Mounting needs root; elsewhere this skips, saying why."""

from __future__ import annotations

import subprocess

import pytest
from test_seams_hostile_probe import F, cvbench, lines, tree


@pytest.mark.slow
def test_a_resume_from_a_read_only_folder_fails_only_at_its_first_new_checkpoint(tmp_path):
    run = cvbench("train", *F, "--log-dir", "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    checkpoints = tmp_path / "run" / "checkpoints"
    for step in (3, 4):  # the run stopped after step 2, the first epoch's last
        (checkpoints / f"ckpt-000000000{step}.npz").unlink()
    kept = tree(checkpoints)
    if subprocess.run(["mount", "--bind", str(checkpoints), str(checkpoints)]).returncode:
        pytest.skip("cannot bind-mount a read-only folder here (needs root)")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(checkpoints)], check=True)
        failed = cvbench("train", *F, "--log-dir", "run", "--resume", cwd=tmp_path)
    finally:
        subprocess.run(["umount", str(checkpoints)], check=False)
    assert failed.returncode == 1, failed.stderr[-3000:]
    # Step 3 trained (--checkpoint-every 1), then its checkpoint could not be written.
    assert lines(failed)[-1] == (
        "cvbench train: error: run/checkpoints/ckpt-0000000003.npz: Read-only file system"
    )
    assert tree(checkpoints) == kept
