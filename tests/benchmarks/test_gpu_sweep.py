"""benchmarks/gpu_sweep.py (#41): its plan, the winners it carries on, its table, the trace
summary, the flag probe, and (heavy) a tiny sweep end to end on this CPU."""

from __future__ import annotations

import doctest
import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_sweep.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_sweep"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_examples():
    outcome = doctest.testmod(_load())
    assert outcome.attempted >= 2 and outcome.failed == 0


def test_the_plan_starts_at_the_baseline_and_sweeps_each_flag_alone():
    sweep = _load()
    cases = sweep.plan(sweep.Sizes())
    assert cases[0].name == "baseline" and cases[0].xla_flags == ""
    flagged = [c for c in cases if c.xla_flags]
    assert [c.xla_flags for c in flagged] == list(sweep.XLA_CASES.values())  # one at a time
    assert {c.name for c in cases} >= {"sync_every_step", "bf16", "batch_384", "batch_512"}
    later = sweep.after_winners(sweep.Sizes(), "--a=1")
    assert later[-1].name == "baseline_again"
    won = [c for c in later if c.name.endswith("+won")]
    assert {c.model for c in won} == {"inception_v3", "ssd320", "resnet50"}
    assert all(c.xla_flags == "--a=1" for c in won)
    # nothing won: no "+won" cases
    assert not [c for c in sweep.after_winners(sweep.Sizes(), "") if "+won" in c.name]


def test_a_case_command_names_its_settings():
    sweep = _load()
    case = sweep.Case("sync_every_step", log_every=1)
    command = case.command("py", sweep.Sizes(), Path("o/c.json"))
    assert command[:6] == ["py", "-m", "cvbench", "benchmark", "--backend", "jax"]
    joined = " ".join(command)
    # the recipe's ResNet-50 batch 256, 60 steps after 10, a sync every step
    assert "--model resnet50 --batch-size 256" in joined
    assert "--steps 60 --burn-in 10 --log-every 1" in joined
    tiny = sweep.Case("ssd320_train", model="ssd320").command("py", sweep.Sizes.tiny(), Path("x"))
    assert "--batch-size 2" in " ".join(tiny) and "--image-size 32" in " ".join(tiny)


def test_winners_need_more_than_one_percent_and_a_baseline():
    sweep = _load()
    rows = [
        {"case": "baseline", "images_per_sec": 100.0, "xla_flags": ""},
        {"case": "latency_hiding", "images_per_sec": 101.5, "xla_flags": "--l=1"},
        {"case": "cudnn_fusion", "images_per_sec": None, "xla_flags": "--c=1"},
        {"case": "bf16", "images_per_sec": 150.0, "xla_flags": ""},  # not a flag case
    ]
    assert sweep.winners(rows) == "--l=1"  # 101.5 > 100 x 1.01
    rows[1]["images_per_sec"] = 100.9
    assert sweep.winners(rows) == ""
    assert sweep.winners(rows[1:]) == ""  # no baseline: nothing to beat


def _trace(path: Path, events: list[dict]) -> None:
    path.mkdir(parents=True)
    with gzip.open(path / "perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)


def test_top_kernels_count_the_device_when_the_trace_has_one(tmp_path):
    sweep = _load()
    events = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "X", "pid": 1, "name": "PjitFunction", "dur": 9000.0},
        {"ph": "X", "pid": 2, "name": "conv_fwd", "dur": 3000.0},
        {"ph": "X", "pid": 2, "name": "conv_fwd", "dur": 1000.0},
        {"ph": "X", "pid": 2, "name": "bn_reduce", "dur": 1000.0},
    ]
    _trace(tmp_path / "plugins" / "profile" / "run1", events)
    # device only: conv_fwd 4 ms of 5 = 80%, bn_reduce 1 ms = 20%; the host's 9 ms left out
    assert sweep.top_kernels(tmp_path) == [("conv_fwd", 4.0, 0.8), ("bn_reduce", 1.0, 0.2)]


def test_top_kernels_of_a_host_trace_leave_python_frames_out(tmp_path):
    sweep = _load()
    events = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "X", "pid": 1, "name": "$profiler.py:307 trace", "dur": 5000.0},
        {"ph": "X", "pid": 1, "name": "ynn_fusion", "dur": 1500.0},
        {"ph": "X", "pid": 1, "name": "wrapped_tanh", "dur": 500.0},
    ]
    _trace(tmp_path / "p", events)
    assert sweep.top_kernels(tmp_path, count=1) == [("ynn_fusion", 1.5, 0.75)]
    with pytest.raises(FileNotFoundError, match="no perfetto_trace"):
        sweep.top_kernels(tmp_path / "p" / "none")


def test_an_unknown_xla_flag_is_found_before_a_case_runs():
    sweep = _load()
    assert sweep.flag_known(sys.executable, "")
    assert not sweep.flag_known(sys.executable, "--xla_no_such_flag_at_all=true")
    assert sweep.flag_known(sys.executable, "--xla_gpu_autotune_level=0")


@pytest.mark.heavy
def test_a_tiny_sweep_runs_end_to_end_on_this_cpu(tmp_path):
    out = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--out", str(out), "--budget", "2400"]
        + ["--cases", "baseline,no_such_flag_case,autotune_0"],
        capture_output=True,
        text=True,
        timeout=2700,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {r["case"]: r for r in json.loads((out / "sweep.json").read_text())}
    assert set(rows) == {"baseline", "autotune_0"}
    assert rows["baseline"]["images_per_sec"] > 0 and rows["baseline"]["status"] == "ok"
    assert rows["autotune_0"]["status"] == "ok"  # a GPU flag XLA on CPU accepts and ignores
    assert "| baseline | resnet18 | train |" in (out / "sweep.md").read_text()
    top = json.loads((out / "profile_resnet18.json").read_text())
    assert top and all(0 < share <= 1 for _, _, share in top)
