"""The harness checks itself: a command run by the fork server ends as `python -m cvbench`
ends (exit status, stderr), a hang is killed at its timeout, and an allocation shows in the
memory figure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hostile import corpus
from hostile.harness import _base_env


def test_the_fork_server_runs_a_command_as_python_m_cvbench_does(server, assets, tmp_path):
    case = tmp_path / "case"
    corpus.png(case / "images" / "a.png")
    corpus.fifo(case / "images" / "x.png")
    (case / "model.keras").write_bytes(assets.cls_model.read_bytes())
    argv = ["predict", "model.keras", "images/x.png"]
    forked = server.run(argv, cwd=case, timeout=120)
    real = subprocess.run(
        [sys.executable, "-m", "cvbench", *argv],
        cwd=case,
        env=_base_env(),
        capture_output=True,
        timeout=300,
    )
    assert (forked.rc, forked.stderr) == (real.returncode, real.stderr)
    assert forked.rc == 1  # the FIFO is named, not read: one line, exit 1


def test_a_hang_is_killed_at_the_timeout(server, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    result = server.run(["fifo"], cwd=tmp_path, timeout=2, call="builtins:open")
    assert result.timed_out and result.rc == -9
    assert 2 <= result.wall_s < 10


def test_the_memory_figure_counts_what_the_command_allocates(server, tmp_path):
    small = server.run(["1"], cwd=tmp_path, call="hostile.harness:allocate")
    large = server.run(["600"], cwd=tmp_path, call="hostile.harness:allocate")
    assert (small.rc, large.rc) == (0, 0), large.err
    assert small.increment < 50 << 20
    assert 580 << 20 < large.increment < 700 << 20
    assert Path(os.devnull).exists()
