"""The torch.compile column (#41): torchvision eager and compiled in the same alternating
windows, each its own column with its ratio, and the flag that asks for it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cvbench.benchmark.results import ThroughputResult
from cvbench.benchmark.workloads import cvbench_model
from cvbench.training.throughput import Throughput
from throughput_suite import reference, suite
from throughput_suite.reference import TORCH, TORCH_COMPILE
from throughput_suite.suite import SuiteConfig
from throughput_suite.table import throughput_table

pytestmark = pytest.mark.backend_agnostic

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_throughput.py"


@pytest.fixture
def torch_calls(monkeypatch):
    calls = []

    def fake_reference(model, **kwargs):
        calls.append((model, kwargs["training"], kwargs["compile"]))
        return f"{model}:{'compiled' if kwargs['compile'] else 'eager'}"

    monkeypatch.setattr(reference, "torch_reference", fake_reference)
    return calls


@pytest.mark.parametrize("training", [True, False])
def test_compiled_torchvision_is_a_column_of_its_own(torch_calls, training):
    config = SuiteConfig(models=("resnet50",), torch_reference=True, torch_compile=True)
    model = cvbench_model("resnet50", image_size=32)
    workloads = suite._torch_workloads(config, model, "float32", training=training)
    assert workloads == {TORCH: "resnet50:eager", TORCH_COMPILE: "resnet50:compiled"}
    assert torch_calls == [("resnet50", training, False), ("resnet50", training, True)]


def test_without_torch_compile_only_eager_runs_and_ssd_has_no_torch_reference(torch_calls):
    config = SuiteConfig(torch_reference=True)
    assert list(suite._torch_workloads(config, cvbench_model("resnet50"), "f", training=True)) == [
        TORCH
    ]
    with_compile = SuiteConfig(torch_reference=True, torch_compile=True)
    assert suite._torch_workloads(with_compile, cvbench_model("ssd320"), "f", training=True) == {}
    assert (
        suite._torch_workloads(SuiteConfig(), cvbench_model("resnet50"), "f", training=True) == {}
    )


def _result(impl: str, rate: float) -> ThroughputResult:
    t = Throughput(rate, float("nan"), 0.0, (rate,), 5, 256, 10.0, 1.0, 5, rate)
    return ThroughputResult("resnet50", "train", impl, "mixed_float16", 256, 224, t)


def test_the_table_gives_cvbench_over_each_torch_column():
    table = throughput_table(
        [_result("cvbench", 7000.0), _result(TORCH, 5600.0), _result(TORCH_COMPILE, 6400.0)]
    ).splitlines()
    assert "| torchvision img/s | cvbench / torchvision | torch.compile img/s |" in table[0]
    # 7000 / 5600 = 1.25; 7000 / 6400 = 1.09
    assert "| 5600.0 | 1.25x | 6400.0 | 1.09x |" in table[2]


def test_torch_compile_needs_torch_reference(capsys):
    spec = importlib.util.spec_from_file_location("train_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as stop:
        module.main(["--torch-compile"])
    assert stop.value.code == 2
    assert "--torch-compile needs --torch-reference" in capsys.readouterr().err
