"""`--deterministic` on the JAX backend's data parallelism: two `cvbench train --deterministic
--seed 1` runs of the same command, in separate processes, write bit-identical checkpoints and
step losses, on 4 CPU devices of one process (ResNet-18 on records fed through tf.data, with a
NaN step that every device must skip alike; SSD320 on seeded synthetic batches) and on 2
processes x 2 devices (`jax.distributed` on localhost, each process reading its own shard).

How `--deterministic` reaches XLA (`cvbench.training.determinism`): the CLI adds
`--xla_gpu_deterministic_ops=true` to `XLA_FLAGS` before JAX starts, keeping the user's flags;
a Trainer on a JAX GPU whose XLA started without it refuses to train. XLA:CPU needs no flag,
so the end-to-end runs here check the data order, seeds, sharding and collectives; the GPU
run of the same comparison is `benchmarks/gpu_run.sh` (docs/gpu.md gives its result)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import keras
import pytest
from ports import free_port

from cvbench.cli.backend_args import distribution_from_args
from cvbench.training import determinism
from cvbench.training.determinism import XLA_DETERMINISTIC_FLAG, enable_determinism

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from compare_runs import compare_runs, read_run  # noqa: E402

HOLD_CLI = Path(__file__).with_name("hold_cli.py")
ENV = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1",
           PYTHONPATH=str(ROOT))  # fmt: skip
COMMON = [
    "--epochs", "2", "--checkpoint-every", "2", "--keep-checkpoints", "100", "--log-every", "1",
    "--burn-in", "0", "--deterministic", "--seed", "1", "--precision", "fp32", "--eval", "none",
    "--no-export", "--no-progress",
]  # fmt: skip


# ------------------------------------------------------------------ the flag, unit by unit
@pytest.mark.parametrize(
    "before, after",
    [
        (None, XLA_DETERMINISTIC_FLAG),
        ("--xla_force_host_platform_device_count=4",
         f"--xla_force_host_platform_device_count=4 {XLA_DETERMINISTIC_FLAG}"),
        (f"{XLA_DETERMINISTIC_FLAG} --xla_dump_to=x", f"{XLA_DETERMINISTIC_FLAG} --xla_dump_to=x"),
    ],
    ids=["unset", "after-the-users", "already-there"],
)  # fmt: skip
def test_the_cli_adds_the_xla_flag_on_jax_and_keeps_the_users(before, after, monkeypatch):
    if before is None:
        monkeypatch.delenv("XLA_FLAGS", raising=False)
    else:
        monkeypatch.setenv("XLA_FLAGS", before)
    monkeypatch.setattr(keras.config, "backend", lambda: "jax")
    args = argparse.Namespace(backend=None, devices=None, deterministic=True)
    assert distribution_from_args(args) == "auto"
    assert os.environ["XLA_FLAGS"] == after


@pytest.mark.parametrize("backend, deterministic", [("tensorflow", True), ("jax", False)])
def test_the_cli_leaves_xla_flags_alone_otherwise(backend, deterministic, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.setattr(keras.config, "backend", lambda: backend)
    args = argparse.Namespace(backend=None, devices=None, deterministic=deterministic)
    distribution_from_args(args)
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"


def _fake_jax_devices(monkeypatch, platform: str) -> None:
    import jax

    device = SimpleNamespace(platform=platform, device_kind="NVIDIA H200")
    monkeypatch.setattr(jax, "devices", lambda *a: [device])
    monkeypatch.setattr(determinism, "_jax_backend_started", lambda: True)


def test_a_started_jax_gpu_without_the_flag_is_refused_naming_it(monkeypatch):
    _fake_jax_devices(monkeypatch, "gpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    with pytest.raises(RuntimeError, match="NVIDIA H200 needs XLA_FLAGS=--xla_gpu_deterministic"):
        enable_determinism("jax")
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"  # too late to add: not added


@pytest.mark.parametrize(
    "platform, flags",
    [("gpu", f"--xla_dump_to=/tmp/x {XLA_DETERMINISTIC_FLAG}"), ("cpu", "")],
    ids=["gpu-with-flag", "cpu"],
)
def test_a_started_jax_with_the_flag_or_on_cpus_trains(platform, flags, monkeypatch):
    _fake_jax_devices(monkeypatch, platform)
    monkeypatch.setenv("XLA_FLAGS", flags)
    enable_determinism("jax")
    assert os.environ["XLA_FLAGS"] == flags


def test_before_jax_starts_the_flag_is_added_and_no_device_is_asked(monkeypatch):
    import jax

    def no_devices(*a):
        raise AssertionError("a device query would start JAX before jax.distributed")

    monkeypatch.setattr(jax, "devices", no_devices)
    monkeypatch.setattr(determinism, "_jax_backend_started", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    enable_determinism("jax")
    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/tmp/x {XLA_DETERMINISTIC_FLAG}"


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("deterministic", [True, False])
def test_the_trainer_sets_determinism_up_before_its_distribution_starts_jax(
    deterministic, monkeypatch
):
    # On JAX the distribution queries the devices (starting XLA, which reads XLA_FLAGS
    # once): determinism must come first.
    from cvbench.training import TrainConfig, Trainer
    from cvbench.training import trainer as trainer_module

    calls = []
    real_distribution = trainer_module.get_distribution
    monkeypatch.setattr(
        trainer_module, "enable_determinism", lambda backend: calls.append(("determinism", backend))
    )
    monkeypatch.setattr(
        trainer_module,
        "get_distribution",
        lambda spec: calls.append(("distribution", spec)) or real_distribution(spec),
    )
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    config = TrainConfig(deterministic=deterministic)
    Trainer(
        model, keras.losses.MeanSquaredError(), schedule=0.1, precision="float32", config=config
    )
    expected = [("determinism", keras.config.backend())] if deterministic else []
    assert calls == [*expected, ("distribution", "auto")]


# ------------------------------------------------------------------ two runs, end to end
def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(HOLD_CLI), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )


def _finish(runs: list[subprocess.Popen]) -> list[str]:
    outputs = [run.communicate(timeout=900)[0] for run in runs]
    for run, out in zip(runs, outputs, strict=True):
        assert run.returncode == 0, out[-3000:]
    return outputs


def _assert_identical(run_a: Path, run_b: Path, *, steps: int, skipped: list[int]) -> None:
    _, logged = read_run(run_a)
    assert sorted(logged) == list(range(1, steps + 1))
    assert [step for step, (_, skip) in logged.items() if skip] == skipped
    result = compare_runs(run_a, run_b)
    assert result["identical"], result
    # A checkpoint every 2 steps and at each epoch end (steps / 2 per epoch).
    saved = [s for s in range(1, steps + 1) if s % 2 == 0 or s % (steps // 2) == 0]
    assert result["checkpoints"] == len(saved)


JAX_CASES = [("resnet18", 2), ("ssd320", None)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, nan_step", JAX_CASES, ids=["resnet18-records-skip2", "ssd320-synthetic-noskip"]
)
def test_two_deterministic_runs_on_four_jax_devices_are_bit_identical(
    model, nan_step, records, tmp_path, legacy_h5
):
    if model == "resnet18":  # 24 records, global batch 8: 3 steps an epoch
        data = ["--data-dir", str(records), "--image-size", "32", "--num-classes", "6"]
    else:  # 3 steps an epoch of seeded synthetic batches, from a (random) backbone file
        notop = keras.applications.ResNet50(weights=None, include_top=False)
        backbone = legacy_h5(notop, tmp_path / "notop.h5", 5)
        data = ["--synthetic", "--steps-per-epoch", "3", "--image-size", "64"]
        data += ["--num-classes", "3", "--backbone-weights", str(backbone)]
    env = dict(ENV, JAX_NUM_CPU_DEVICES="4")
    if nan_step:
        env["CVBENCH_TEST_NAN_STEPS"] = str(nan_step)
    argv = ["train", "--model", model, "--batch-size", "8", *data, *COMMON]
    outputs = _finish([_start([*argv, "--log-dir", str(tmp_path / r)], env) for r in "ab"])
    assert "(over 4 devices: 2 images per device)" in outputs[0]
    _assert_identical(tmp_path / "a", tmp_path / "b", steps=6, skipped=[nan_step] * bool(nan_step))


@pytest.mark.slow
def test_two_deterministic_runs_on_two_jax_processes_are_bit_identical(records, tmp_path):
    # 2 processes x 2 CPU devices, each process reading one of the 2 training shards (12
    # records): 4 per process and step, global batch 8, 3 steps an epoch.
    argv = ["train", "--model", "resnet18", "--batch-size", "4", "--data-dir", str(records),
            "--image-size", "32", "--num-classes", "6", *COMMON]  # fmt: skip
    for run in "ab":  # one run (two processes) at a time
        port = free_port()
        env = dict(ENV, JAX_NUM_CPU_DEVICES="2", KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                   KERAS_DISTRIBUTION_JOB_ADDRESSES=f"localhost:{port}")  # fmt: skip
        processes = [
            _start(
                [*argv, "--log-dir", str(tmp_path / run)],
                dict(env, KERAS_DISTRIBUTION_PROCESS_ID=str(i)),
            )  # fmt: skip
            for i in range(2)
        ]
        outputs = _finish(processes)
        assert "global batch 8 = 2 x 4" in outputs[0]
    _assert_identical(tmp_path / "a", tmp_path / "b", steps=6, skipped=[])
