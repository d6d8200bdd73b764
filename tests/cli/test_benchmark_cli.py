"""`cvbench benchmark`: the suite's code path (`benchmark_cvbench`), its lines and its JSON."""

from __future__ import annotations

import json

import pytest

import cvbench.cli as cli
from cvbench.benchmark import run as run_module
from cvbench.utils import cpu as cpu_module

TINY = ["--model", "resnet18", "--synthetic", "--batch-size", "2", "--image-size", "32"]
TINY += ["--num-classes", "4", "--precision", "fp32"]


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.benchmark",))


def test_flags_reach_benchmark_cvbench(monkeypatch, tmp_path, capsys):
    # The command is a thin layer over the suite's function: record what it is given.
    seen = {}

    def fake(model, **kwargs):
        seen.update(kwargs, model=model)
        kwargs["report"]("     3       10.0 img/s")
        from cvbench.benchmark.results import ThroughputResult
        from cvbench.training.throughput import Throughput

        # Two windows of 5 steps x 8 images at 40 and 60 img/s: mean 50, 2 windows so NaN
        # standard error, jitter 1.4826 x median(|40 - 50|, |60 - 50|) = 14.826.
        t = Throughput(50.0, float("nan"), 14.826, (40.0, 60.0), 5, 8, 1.0, 0.5, 1, 25.0)
        return ThroughputResult("resnet18", kwargs["mode"], "cvbench", "float32", 8, 32, t)

    monkeypatch.setattr(run_module, "benchmark_cvbench", fake)
    monkeypatch.setattr(cpu_module, "describe_cpu", lambda: "AMD EPYC, 2 cores, flags: avx2")
    path = tmp_path / "bench.json"
    argv = ["benchmark", *TINY, "--steps", "10", "--burn-in", "3", "--log-every", "5"]
    assert cli.main([*argv, "--seed", "7", "--json", str(path)]) == 0
    # The task `cvbench train` would make of the same flags: the model's recipe, resolved.
    task = seen["model"]
    assert task.options.model == "resnet18" and task.recipe.name == "resnet18_cvbench"
    assert seen["mode"] == "train" and seen["batches"] is None
    assert (seen["batch_size"], task.image_size, task.num_classes) == (2, 32, 4)
    assert (seen["precision"], seen["seed"]) == ("fp32", 7)
    # --burn-in steps (the first compiles), then --steps in windows of --log-every; the
    # synthetic data holds every step run
    assert (seen["warmup_steps"], seen["steps"], seen["window_steps"]) == (3, 10, 5)
    assert task.options.synthetic_steps == 13
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["  step      img/s", "     3       10.0 img/s"]
    assert out[3] == "cpu: AMD EPYC, 2 cores, flags: avx2"  # a figure names its machine
    assert out[4] == "devices: 1 (single; images/s over all of them)"
    assert out[5] == "Images/sec: 50.0 (2 windows: too few for a standard error; jitter = 14.8)"
    summary = json.loads(path.read_text())
    assert summary["mean"] == 50.0 and summary["stderr"] is None  # strict JSON: NaN -> null
    assert summary["steps"] == 10 and summary["global_batch"] == 8 and summary["ranks"] == 1
    assert summary["devices"] == 1
    assert summary["window_rates"] == [40.0, 60.0] and summary["cpu_images_per_sec"] == 25.0
    assert summary["model"] == "resnet18" and summary["latency"] is None
    assert summary["cpu"] == "AMD EPYC, 2 cores, flags: avx2"


def test_log_every_zero_prints_no_step_lines(monkeypatch, capsys):
    seen = {}

    def fake(model, **kwargs):
        seen.update(kwargs)
        raise ValueError("stop here")

    monkeypatch.setattr(run_module, "benchmark_cvbench", fake)
    assert cli.main(["benchmark", *TINY, "--log-every", "0"]) == 2
    assert seen["report"] is None and seen["window_steps"] == 10
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "cvbench: error: stop here\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--latency-batch-sizes", "1,0"], "positive integer"),
        (["--latency-calls", "0"], "positive integer"),
    ],
)
def test_bad_latency_flags_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["benchmark", *TINY, *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_burn_in_0_is_refused(capsys):
    # probe p51 F3: --burn-in 0 was accepted and run as 1 (help: "at least 1"), and the
    # synthetic data counted one step fewer than ran
    with pytest.raises(SystemExit) as e:
        cli.main(["benchmark", *TINY, "--burn-in", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.splitlines()[-1] == (
        "cvbench benchmark: error: argument --burn-in: expected a positive integer, got 0 "
        "(see cvbench benchmark --help)"
    )


SIZES_NEED_INFERENCE = (
    "--latency-batch-sizes needs --mode inference: it has no effect with --mode train"
)
CALLS_NEED_SIZES = (
    "--latency-calls needs --latency-batch-sizes (and --mode inference): no latency is timed "
    "without it"
)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--latency-batch-sizes", "1,2"], SIZES_NEED_INFERENCE),
        (["--latency-batch-sizes", "1", "--latency-calls", "3"], SIZES_NEED_INFERENCE),
        (["--latency-calls", "3"], CALLS_NEED_SIZES),
        (["--mode", "inference", "--latency-calls", "3"], CALLS_NEED_SIZES),
    ],
    ids=["sizes_with_train", "both_with_train", "calls_alone", "calls_without_sizes"],
)
def test_latency_flags_where_they_have_no_effect_are_refused(flags, message, monkeypatch, capsys):
    # probe p51 F2: --latency-batch-sizes / --latency-calls without --mode inference were
    # silently ignored (the training table only, exit 0); refused as --data-workers without
    # grain is, before the model is built
    def never(*args, **kwargs):
        raise AssertionError("the benchmark ran")

    monkeypatch.setattr(run_module, "benchmark_cvbench", never)
    assert cli.main(["benchmark", *TINY, *flags]) == 2
    assert capsys.readouterr().err == f"cvbench: error: {message}\n"


def test_unknown_model_is_one_line(capsys):
    argv = ["benchmark", "--model", "resnet9", "--synthetic", "--steps", "1"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("cvbench: error: unknown model 'resnet9'; known:") and err.count("\n") == 1
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--mode", "inference", "--devices", "1"], "--devices is for --mode train"),
        (["--devices", "2"], "--devices is for the JAX backend (--backend jax), not tensorflow"),
        (["--backend", "jax"], "--backend jax: Keras already runs the tensorflow backend"),
    ],
)
def test_backend_flags_give_one_line_and_exit_2(flags, message, capsys):
    # This suite's Keras runs on TensorFlow (the tests not marked backend_agnostic).
    assert cli.main(["benchmark", *TINY, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.slow  # a ResNet-18 train step and forward passes compiled
def test_a_tiny_training_and_inference_benchmark(tmp_path, capsys):
    argv = ["benchmark", *TINY, "--steps", "2", "--burn-in", "1", "--log-every", "1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    # Steps 2 and 3 end the two windows (after one burn-in step).
    assert [line.split()[0] for line in out[1:3]] == ["2", "3"]
    assert out[4].startswith("cpu: ") and out[5] == "devices: 1 (single; images/s over all of them)"
    assert out[6].startswith("Images/sec: ")

    path = tmp_path / "inference.json"
    argv = ["benchmark", *TINY, "--mode", "inference", "--steps", "2", "--burn-in", "1"]
    argv += ["--latency-batch-sizes", "1,2", "--latency-calls", "3", "--json", str(path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "| resnet18 | float32 | 32 | 2 |" in out  # the latency table's batch-2 row
    summary = json.loads(path.read_text())
    assert summary["mode"] == "inference" and summary["steps"] == 2 and summary["mean"] > 0
    assert summary["devices"] == 1
    latencies = summary["latency"]["latencies"]
    assert [x["batch_size"] for x in latencies] == [1, 2]
    assert all(
        x["calls"] == 3 and set(x["percentiles_ms"]) == {"p50", "p90", "p95", "p99"}
        for x in latencies
    )


@pytest.mark.slow  # a ResNet-18 train step compiled, TFRecords decoded
def test_training_on_tfrecords_runs_epoch_after_epoch(tmp_path):
    from test_train_cli import write_tiny_imagenet  # the tiny ImageNet of the CLI tests

    records = write_tiny_imagenet(tmp_path / "imagenet", train=8)
    argv = ["benchmark", *[a for a in TINY if a != "--synthetic"], "--data-dir", str(records)]
    path = tmp_path / "records.json"
    # 8 images in batches of 2: 4 steps an epoch, so 1 burn-in + 5 measured steps need a
    # second epoch.
    argv += ["--steps", "5", "--burn-in", "1", "--log-every", "5", "--json", str(path)]
    assert cli.main(argv) == 0
    summary = json.loads(path.read_text())
    assert summary["steps"] == 5 and summary["window_steps"] == 5 and summary["mean"] > 0
