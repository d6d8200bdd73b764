"""Compares two `cvbench train` run folders bit for bit: every checkpoint's arrays (weights,
optimizer state, counters, metadata) and every logged step's loss and skip flag.

Two `--deterministic` runs of the same command with the same seed must be identical; this
says whether they are, and where they first differ if not:

    python scripts/compare_runs.py runs/a runs/b --json compare.json

Exit status 0 when identical, 1 when they differ, 2 for a folder without checkpoints or
`train_log.jsonl`. Run folders are trusted input (`np.load` without pickles).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def read_run(run_dir: str | Path) -> tuple[dict[str, dict[str, np.ndarray]], dict[int, tuple]]:
    """`(checkpoints, steps)` of a run folder: each `checkpoints/ckpt-*.npz` by file name as
    `{array name: array}`, and each `step` event of `train_log.jsonl` as
    `{step: (loss, skipped)}`.

    Raises:
        FileNotFoundError: no checkpoint, or no `train_log.jsonl`, naming the folder.
    """
    run_dir = Path(run_dir)
    paths = sorted((run_dir / "checkpoints").glob("ckpt-*.npz"))
    log = run_dir / "train_log.jsonl"
    if not paths or not log.is_file():
        raise FileNotFoundError(f"{run_dir}: no checkpoints/ckpt-*.npz or no train_log.jsonl")
    checkpoints = {}
    for path in paths:
        with np.load(path, allow_pickle=False) as data:
            checkpoints[path.name] = {key: data[key] for key in data.files}
    steps = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("event") == "step":
            steps[entry["step"]] = (entry["loss"], entry.get("skipped", 0))
    return checkpoints, steps


def _array_difference(a: np.ndarray, b: np.ndarray) -> float | None:
    """The largest |a - b| (inf for other shapes or dtypes); None when bit-identical."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf")
    if a.tobytes() == b.tobytes():
        return None
    if a.dtype.kind in "fciub":  # NaNs where the other has numbers count as 0 here
        return float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
    return float("inf")


def compare_runs(run_a: str | Path, run_b: str | Path) -> dict[str, Any]:
    """What differs between two run folders.

    Returns:
        `identical` (bool), the counts compared (`checkpoints`, `arrays`, `steps`), the
        checkpoint names only one run has (`unmatched_checkpoints`), each differing array as
        `{"checkpoint", "array", "max_abs_diff"}` (`differing_arrays`, in checkpoint order),
        and the steps whose loss or skip flag differ (`differing_steps`, with both values).
    """
    ckpt_a, steps_a = read_run(run_a)
    ckpt_b, steps_b = read_run(run_b)
    unmatched = sorted(set(ckpt_a) ^ set(ckpt_b))
    differing, arrays = [], 0
    for name in sorted(set(ckpt_a) & set(ckpt_b)):
        for key in sorted(set(ckpt_a[name]) | set(ckpt_b[name])):
            arrays += 1
            if key not in ckpt_a[name] or key not in ckpt_b[name]:
                diff = float("inf")
            else:
                diff = _array_difference(ckpt_a[name][key], ckpt_b[name][key])
            if diff is not None:
                differing.append({"checkpoint": name, "array": key, "max_abs_diff": diff})
    step_diffs = [
        {"step": step, "a": steps_a.get(step), "b": steps_b.get(step)}
        for step in sorted(set(steps_a) | set(steps_b))
        if steps_a.get(step) != steps_b.get(step)
    ]
    return {
        "identical": not (unmatched or differing or step_diffs),
        "checkpoints": len(set(ckpt_a) & set(ckpt_b)),
        "arrays": arrays,
        "steps": len(set(steps_a) | set(steps_b)),
        "unmatched_checkpoints": unmatched,
        "differing_arrays": differing,
        "differing_steps": step_diffs,
    }


def summary_line(result: dict[str, Any]) -> str:
    """One line: identical, or how many arrays/steps differ and the first of them."""
    counts = f"{result['checkpoints']} checkpoints, {result['arrays']} arrays, "
    counts += f"{result['steps']} steps"
    if result["identical"]:
        return f"identical: {counts}"
    parts = []
    if result["unmatched_checkpoints"]:
        parts.append(f"checkpoints in one run only: {', '.join(result['unmatched_checkpoints'])}")
    if result["differing_arrays"]:
        first = result["differing_arrays"][0]
        parts.append(
            f"{len(result['differing_arrays'])} arrays differ, first {first['array']} of "
            f"{first['checkpoint']} (max |diff| {first['max_abs_diff']:.3g})"
        )
    if result["differing_steps"]:
        first = result["differing_steps"][0]
        parts.append(
            f"{len(result['differing_steps'])} step losses differ, first step {first['step']} "
            f"({first['a']} vs {first['b']})"
        )
    return f"differ ({counts}): " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_a", help="a run folder (--log-dir of cvbench train)")
    p.add_argument("run_b", help="the other run folder")
    p.add_argument("--json", default=None, help="also write the comparison to this file")
    args = p.parse_args(argv)
    try:
        result = compare_runs(args.run_a, args.run_b)
    except FileNotFoundError as e:
        print(f"compare_runs: error: {e}", file=sys.stderr)
        return 2
    print(summary_line(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
