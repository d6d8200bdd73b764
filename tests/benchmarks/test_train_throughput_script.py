"""benchmarks/train_throughput.py end to end at a tiny size: table, JSON, no TensorFlow on JAX.

The keras.applications reference is replaced by a tiny Keras model (the real ones take
minutes to compile here); `test_reference.py` checks the real builders.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import keras
import pytest

from cvbench.utils.cpu import SPEED_FLAGS, describe_cpu
from throughput_suite import reference

pytestmark = pytest.mark.backend_agnostic

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_throughput.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("train_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny_application(model, *, image_size, num_classes, precision):
    from cvbench.training.precision import dtype_policy_scope

    with dtype_policy_scope(precision):
        inputs = keras.Input((image_size, image_size, 3))
        h = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, strides=4)(inputs))
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(h))


@pytest.mark.slow  # ~25 s on TensorFlow, ~70 s on JAX CPU (compiling ResNet-18 four times)
def test_script_measures_cvbench_beside_the_reference(tmp_path, monkeypatch, capsys):
    tf_absent = "tensorflow" not in sys.modules
    monkeypatch.setattr(reference, "KERAS_APPLICATIONS", {"resnet18": "tiny"})
    monkeypatch.setattr(reference, "keras_application", _tiny_application)
    out = tmp_path / "result.json"
    status = _load_script().main(
        [
            "--models", "resnet18", "--precisions", "fp32", "--batch-size", "2",
            "--image-size", "32", "--warmup", "1", "--windows", "2", "--window-steps", "1",
            "--latency-batch-sizes", "1,2", "--latency-calls", "2",
            "--json", str(out), "--markdown", str(tmp_path / "table.md"),
        ]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"cpu: {describe_cpu()}\n")  # a figure names its machine
    assert "| resnet18 | train | float32 | 2 | 32 |" in printed
    assert "cvbench / keras.applications" in printed
    assert (tmp_path / "table.md").read_text() in printed + "\n"

    result = json.loads(out.read_text())  # strict JSON: NaN written as null
    env = result["environment"]
    assert env["backend"] == keras.config.backend()
    assert env["cpu_line"] == describe_cpu() and set(env["cpu_flags"]) <= set(SPEED_FLAGS)
    assert env["command"].startswith("python benchmarks/train_throughput.py --models resnet18")
    assert result["config"]["batch_size"] == 2 and result["config"]["windows"] == 2
    rows = {(r["mode"], r["implementation"]): r for r in result["throughput"]}
    assert set(rows) == {
        ("train", "cvbench"),
        ("train", "keras.applications"),
        ("inference", "cvbench"),
        ("inference", "keras.applications"),
    }
    train = rows[("train", "cvbench")]
    assert train["images_per_step"] == 2 and len(train["window_rates"]) == 2
    assert train["stderr"] is None  # two windows: no standard error
    assert train["image_size"] == 32 and train["precision"] == "float32"
    (latency,) = result["latency"]
    assert [lat["batch_size"] for lat in latency["latencies"]] == [1, 2]
    assert set(latency["latencies"][0]["percentiles_ms"]) == {"p50", "p90", "p95", "p99"}
    if keras.config.backend() == "jax" and tf_absent:
        assert "tensorflow" not in sys.modules  # the JAX path never imports TensorFlow


def test_script_rejects_bad_lists():
    parser = _load_script().build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--latency-batch-sizes", "1,0"])
    assert parser.parse_args(["--latency-batch-sizes", "none"]).latency_batch_sizes == ()
    assert parser.parse_args(["--precisions", "fp32,bf16"]).precisions == ("fp32", "bf16")
