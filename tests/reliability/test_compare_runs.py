"""`scripts/compare_runs.py`, the bit-for-bit comparison the determinism tests and the GPU run
rest on: it must see a one-ulp change, a step loss, a missing checkpoint and a missing array."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from compare_runs import compare_runs, main, summary_line  # noqa: E402


def _run(folder: Path, arrays: dict[int, dict[str, np.ndarray]], losses: list[float]) -> Path:
    (folder / "checkpoints").mkdir(parents=True)
    for step, named in arrays.items():
        np.savez(folder / "checkpoints" / f"ckpt-{step:010d}.npz", **named)
    events = [{"event": "start"}]
    for step, loss in enumerate(losses, start=1):
        events.append({"event": "step", "step": step, "loss": loss, "skipped": 0.0})
    (folder / "train_log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


def _arrays(kernel: np.ndarray) -> dict[int, dict[str, np.ndarray]]:
    meta = np.frombuffer(b'{"step": 2}', np.uint8)
    return {2: {"kernel": kernel, "meta": meta}}


KERNEL = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)


def test_identical_runs(tmp_path, capsys):
    a = _run(tmp_path / "a", _arrays(KERNEL), [1.5, 1.25])
    b = _run(tmp_path / "b", _arrays(KERNEL.copy()), [1.5, 1.25])
    result = compare_runs(a, b)
    assert result["identical"]
    assert (result["checkpoints"], result["arrays"], result["steps"]) == (1, 2, 2)
    assert main([str(a), str(b)]) == 0
    assert capsys.readouterr().out == "identical: 1 checkpoints, 2 arrays, 2 steps\n"


def test_one_ulp_in_one_weight_is_named_with_its_size(tmp_path):
    changed = KERNEL.copy()
    changed[1, 0] = np.nextafter(np.float32(3.0), np.float32(4.0))  # 3 + 2**-22
    a = _run(tmp_path / "a", _arrays(KERNEL), [1.5])
    b = _run(tmp_path / "b", _arrays(changed), [1.5])
    result = compare_runs(a, b)
    assert not result["identical"]
    assert result["differing_arrays"] == [
        {"checkpoint": "ckpt-0000000002.npz", "array": "kernel", "max_abs_diff": 2.0**-22}
    ]
    assert result["differing_steps"] == []
    assert main([str(a), str(b)]) == 1


def test_a_step_loss_a_missing_checkpoint_and_a_missing_array(tmp_path, capsys):
    a = _run(tmp_path / "a", {**_arrays(KERNEL), 4: {"kernel": KERNEL}}, [1.5, 1.25])
    b = _run(tmp_path / "b", {2: {"kernel": KERNEL}}, [1.5, 1.0])
    result = compare_runs(a, b)
    assert result["unmatched_checkpoints"] == ["ckpt-0000000004.npz"]
    assert result["differing_arrays"] == [
        {"checkpoint": "ckpt-0000000002.npz", "array": "meta", "max_abs_diff": float("inf")}
    ]
    assert result["differing_steps"] == [{"step": 2, "a": (1.25, 0.0), "b": (1.0, 0.0)}]
    line = summary_line(result)
    assert line.startswith("differ (1 checkpoints, 2 arrays, 2 steps): checkpoints in one run")
    assert "1 step losses differ, first step 2 ((1.25, 0.0) vs (1.0, 0.0))" in line


def test_a_folder_without_checkpoints_is_exit_2_naming_it(tmp_path, capsys):
    a = _run(tmp_path / "a", _arrays(KERNEL), [1.5])
    (tmp_path / "empty").mkdir()
    assert main([str(a), str(tmp_path / "empty")]) == 2
    assert f"{tmp_path / 'empty'}: no checkpoints" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_numbers_of_each_kind_are_measured_not_wrapped(dtype, tmp_path):
    # uint8 2 vs 3: |2 - 3| = 1, not the 255 an unsigned subtraction would give.
    a = _run(tmp_path / "a", {2: {"x": np.array([3], dtype)}}, [1.0])
    b = _run(tmp_path / "b", {2: {"x": np.array([2], dtype)}}, [1.0])
    assert compare_runs(a, b)["differing_arrays"][0]["max_abs_diff"] == 1.0
