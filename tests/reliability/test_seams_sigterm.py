"""SIGTERM during `cvbench eval` and during `build-imagenet` / `build-coco`: the command
stops within seconds with exit 143 and one line `cvbench COMMAND: SIGTERM received:
stopped; <what is kept>`; the outputs of earlier runs are byte-identical, and nothing
partial is presented as complete (no half shard under a shard's name, no temporary left
once a later write comes, no results file).

The signal is sent by the process itself right after a chosen function returns (the
function's module attribute is wrapped), then the process waits: the handler must stop it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cvbench.data.dataset_info import read_dataset_info

ROOT = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")

# Wraps MODULE.NAME: after its `AFTER_CALLS`-th call returns, the process sends itself
# SIGTERM (writing the time to SIGNAL_TIME) and sleeps: only the handler can end it.
_SCRIPT = """
import importlib, os, signal, sys, time
module, name = os.environ["SIGTERM_AFTER"].rsplit(".", 1)
module = importlib.import_module(module)
original = getattr(module, name)
calls = []
def wrapped(*args, **kwargs):
    result = original(*args, **kwargs)
    calls.append(1)
    if len(calls) == int(os.environ.get("AFTER_CALLS", "1")):
        with open(os.environ["SIGNAL_TIME"], "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(120)
    return result
setattr(module, name, wrapped)
from cvbench.cli import run
run(sys.argv[1:])
"""


def _stopped(tmp_path: Path, after: str, *argv: str, cwd: Path, calls: int = 1):
    stamp = tmp_path / "signal_time"
    env = dict(ENV, SIGTERM_AFTER=after, AFTER_CALLS=str(calls), SIGNAL_TIME=str(stamp))
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *argv], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    ended = time.time()
    assert stamp.exists(), run.stderr[-3000:]
    return run, ended - float(stamp.read_text())


def _lines(run) -> list[str]:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return [line for line in run.stderr.splitlines() if line.startswith("cvbench")]


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


_EVAL = ["--model", "resnet18", "--image-size", "32", "--num-classes", "3", "--synthetic",
         "--batch-size", "2", "--precision", "fp32", "--seed", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    from cvbench import cli

    root = tmp_path_factory.mktemp("sigterm_eval")
    argv = ["train", *_EVAL, "--epochs", "1", "--steps-per-epoch", "1", "--eval", "none"]
    assert cli.main([*argv, "--no-progress", "--no-export", "--log-dir", str(root / "run")]) == 0
    return root


def test_sigterm_during_eval_stops_within_seconds_and_keeps_the_earlier_results(
    finished_run, tmp_path
):
    work = tmp_path / "work"
    work.mkdir()
    run_dir = finished_run / "run"
    argv = ["eval", *_EVAL, "--checkpoint", str(run_dir), "--json", "results.json"]
    from cvbench import cli

    cwd = os.getcwd()
    os.chdir(work)
    try:
        assert cli.main(argv) == 0  # an earlier eval's --json report
    finally:
        os.chdir(cwd)
    earlier = json.loads((work / "results.json").read_text())
    before_work, before_run = _tree(work), _tree(run_dir)
    run, took = _stopped(
        tmp_path, "cvbench.tasks.evaluation.load_checkpoint_weights", *argv, cwd=work
    )
    assert run.returncode == 143, run.stderr[-3000:]
    assert _lines(run) == ["cvbench eval: SIGTERM received: stopped; no results were written"]
    assert took < 10, took  # the handler ends the wait at once (TensorFlow's exit aside)
    assert json.loads((work / "results.json").read_text()) == earlier
    assert _tree(work) == before_work  # the report and its outputs list; no temporary
    assert _tree(run_dir) == before_run


def _raw(tmp_path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    from imagenet_testdata import make_raw

    return make_raw(tmp_path / "raw", val_layout="folders").root


def _shards_complete(folder: Path, pattern: str) -> None:
    """Every file named like a shard holds whole records (CRCs checked)."""
    from cvbench.data.tfrecord import iter_tfrecord

    for shard in folder.glob(pattern):
        assert sum(1 for _ in iter_tfrecord(shard)) > 0, shard


def test_sigterm_during_build_imagenet_keeps_the_kept_split_and_no_half_shard(tmp_path):
    from cvbench.data.builders.imagenet_builder import build_imagenet

    raw = _raw(tmp_path)
    out = tmp_path / "out"
    build_imagenet(raw, out, train_shards=2, val_shards=2, num_workers=1, progress=False)
    validation = {k: v for k, v in _tree(out).items() if k.startswith("validation-")}
    info = read_dataset_info(out)
    shutil.rmtree(raw / "validation")  # train alone is rebuilt (--overwrite): validation kept
    argv = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(out),
            "--train-shards", "3", "--val-shards", "2", "--workers", "1", "--no-progress",
            "--overwrite"]  # fmt: skip
    run, took = _stopped(
        tmp_path,
        "cvbench.data.builders.imagenet_builder.encode_image_item",
        *argv,
        cwd=tmp_path,
        calls=3,
    )
    assert run.returncode == 143, run.stderr[-3000:]
    assert _lines(run)[-1] == (
        "cvbench build-imagenet: SIGTERM received: stopped; what it had finished is kept"
    )
    assert took < 10, took
    after = _tree(out)
    # The validation split (the same settings: kept) byte-identical.
    assert {k: v for k, v in after.items() if k.startswith("validation-")} == validation
    _shards_complete(out, "train-*-of-*")
    assert not [name for name in after if ".tmp" in name]  # temporaries removed on the stop
    # The description keeps validation's entry and describes no unfinished train split.
    stopped = read_dataset_info(out)
    assert dict(stopped.splits) == {"validation": info.splits["validation"]}
    assert [dict(c.images) for c in stopped.classes] == [
        {"validation": c.images["validation"]} for c in info.classes
    ]
    # A rerun finishes the build.
    done = subprocess.run(
        [sys.executable, "-m", "cvbench", *argv], cwd=tmp_path, env=ENV, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list(out.glob("train-*-of-00003"))) == 3
    assert read_dataset_info(out).splits == info.splits  # both described again


def test_sigterm_during_build_coco_leaves_earlier_splits_intact(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "data" / "builders"))
    from test_coco_splits import user_split

    train = user_split(tmp_path / "raw", "train", 5)
    val = user_split(tmp_path / "raw", "val", 3, seed=1)
    out = tmp_path / "out"
    first = ["build-coco", str(out), "--workers", "1", "--no-progress"]
    first += ["--annotations", str(train), "--images", str(train.with_suffix("")), "--split",
              "train"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "cvbench", *first], cwd=tmp_path, env=ENV, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    before = _tree(out)
    argv = ["build-coco", str(out), "--workers", "1", "--no-progress", "--annotations",
            str(val), "--images", str(val.with_suffix("")), "--split", "val"]  # fmt: skip
    run, took = _stopped(
        tmp_path, "cvbench.data.builders.coco_builder.encode_coco_item", *argv, cwd=tmp_path
    )
    assert run.returncode == 143, run.stderr[-3000:]
    assert _lines(run)[-1] == (
        "cvbench build-coco: SIGTERM received: stopped; what it had finished is kept"
    )
    assert took < 10, took
    after = _tree(out)
    # train's shards, instances file and description byte-identical; no val presented.
    assert {k: v for k, v in after.items() if k.startswith("coco_train")} == {
        k: v for k, v in before.items() if k.startswith("coco_train")
    }
    assert after["dataset_info.json"] == before["dataset_info.json"]
    assert "instances_val.json" not in after
    _shards_complete(out, "coco_val.record-*")
    assert not [name for name in after if ".tmp" in name]
