"""examples/launch/: NVIDIA DeepLearningExamples' entry points as thin scripts over our CLI.

Each script runs under bash with stand-ins for `cvbench`, `horovodrun`, `mpirun` and `srun`
that record their argument lists; every recorded command is then checked by the docs
harness's real parsers (cvbench's, Horovod's, the launched command's), so a flag that does
not exist, a recipe name that is wrong or a bad `horovodrun` option fails here. The 1-GPU
forms (train, evaluate, inference benchmark) also run for real at tiny size on CPU.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from docs_commands import ROOT, Command
from docs_parsers import parse_command

LAUNCH = ROOT / "examples" / "launch"
SCRIPTS = sorted(LAUNCH.glob("*.sh"))
SEPARATOR = "\x1f"
STAND_INS = ("cvbench", "horovodrun", "mpirun", "srun")
# What a user sets; the scripts' own defaults fill the rest.
ENV = {"DATA_DIR": "/data/records", "CHECKPOINT": "runs/rn50", "NODE1": "node1", "NODE2": "node2"}


def recorded_commands(script: Path, tmp_path: Path, *args: str) -> list[list[str]]:
    """The commands `script` runs (with `args`), recorded by stand-ins on PATH."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    for name in STAND_INS:
        stand_in = bin_dir / name
        stand_in.write_text(
            "#!/usr/bin/env bash\n"
            f'(IFS=$\'{SEPARATOR}\'; echo "{name}{SEPARATOR}$*") >> "{calls}"\n'
        )
        stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **ENV)
    run = subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return [line.split(SEPARATOR) for line in calls.read_text().splitlines()]


def test_the_scripts_cover_dles_entry_points():
    names = {p.name for p in SCRIPTS}
    assert names == {
        "resnet50_90e_1gpu.sh", "resnet50_90e_8gpu.sh", "resnet50_250e_1gpu.sh",
        "resnet50_250e_8gpu.sh", "ssd320_fp16_1gpu.sh", "ssd320_fp16_4gpu.sh",
        "ssd320_fp16_8gpu.sh", "multinode_horovodrun.sh", "multinode_mpirun.sh",
        "multinode_slurm.sh", "evaluate_checkpoint.sh", "inference_benchmark.sh",
    }  # fmt: skip
    for path in SCRIPTS:
        assert os.access(path, os.X_OK), f"{path.name} is not executable"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_command_parses_with_the_real_parsers(script, tmp_path):
    (command,) = recorded_commands(script, tmp_path, "--seed", "1")
    parse_command(Command(1, command), [], set())
    assert command[-2:] == ["--seed", "1"]  # the script passes extra flags on
    text = " ".join(command)
    ranks = {"1gpu": None, "4gpu": "-np 4", "8gpu": "-np 8", "multinode_h": "-np 16"}
    for tag, np_flag in ranks.items():
        if tag in script.name and np_flag:
            assert np_flag in text, text


def test_a_missing_data_dir_is_one_line_and_runs_nothing(tmp_path):
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    run = subprocess.run(["bash", str(LAUNCH / "resnet50_90e_1gpu.sh")], env=env, text=True,
                         capture_output=True, timeout=60)  # fmt: skip
    assert run.returncode != 0 and "DATA_DIR: ImageNet TFRecords" in run.stderr


TINY = ["--image-size", "32", "--batch-size", "2", "--num-classes", "4", "--precision", "fp32"]


@pytest.mark.slow
def test_the_one_gpu_forms_run_at_tiny_size(tmp_path):
    from jpeg_records import write_jpeg_records

    records = tmp_path / "records"
    for split, count in (("train", 4), ("validation", 4)):
        write_jpeg_records(records / f"{split}-00000-of-00001", count, num_classes=4,
                           prefix=split)  # fmt: skip
    bin_dir = Path(sys.executable).parent  # the venv's cvbench
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               DATA_DIR=str(records), LOG_DIR=str(tmp_path / "run"),
               TF_CPP_MIN_LOG_LEVEL="2")  # fmt: skip

    def run(script: str, *args: str, **extra: str) -> None:
        done = subprocess.run(["bash", str(LAUNCH / script), *args],
                              env=dict(env, **extra), capture_output=True, text=True,
                              timeout=900, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    run("resnet50_90e_1gpu.sh", *TINY, "--epochs", "1", "--steps-per-epoch", "1", "--eval",
        "none", "--no-export", "--no-progress")  # fmt: skip
    assert (tmp_path / "run" / "checkpoints" / "ckpt-0000000001.npz").is_file()
    run("evaluate_checkpoint.sh", "--precision", "fp32", CHECKPOINT=str(tmp_path / "run"),
        JSON=str(tmp_path / "eval.json"))  # fmt: skip
    # 4 classes: no top-5 (1.0 by construction)
    assert set(json.loads((tmp_path / "eval.json").read_text())) == {"loss", "top1"}
    run("inference_benchmark.sh", "--image-size", "32", "--burn-in", "1", "--precision", "fp32",
        MODEL="resnet18", BATCH_SIZE="2", STEPS="2", JSON=str(tmp_path / "bench.json"))  # fmt: skip
    assert json.loads((tmp_path / "bench.json").read_text())["steps"] == 2
