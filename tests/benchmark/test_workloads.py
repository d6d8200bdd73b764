"""Workloads on tiny models: the task's models and batches, SSD data and post-processing,
latency skips sizes that run out of memory."""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest
from tiny_keras import tiny_batch, tiny_classifier

from cvbench.benchmark import run
from cvbench.benchmark.run import benchmark_cvbench, is_out_of_memory, measure_latencies
from cvbench.benchmark.workloads import Forward, cvbench_model, synthetic_batch

pytestmark = pytest.mark.backend_agnostic


def test_forward_runs():
    model = tiny_classifier()
    images = keras.ops.convert_to_tensor(tiny_batch()[0])
    forward = Forward(model, images)
    forward.first_step()
    forward.run(3)
    assert forward.images_per_step == 4


def test_forward_postprocesses_every_pass_once_and_in_order():
    calls = []
    inputs = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(inputs)
    model = keras.Model(inputs, {"boxes": keras.layers.Dense(4)(pooled)})
    images = keras.ops.convert_to_tensor(tiny_batch()[0])
    forward = Forward(
        model,
        images,
        postprocess=lambda out: calls.append(keras.ops.convert_to_numpy(out["boxes"])),
    )
    forward.run(3)
    assert len(calls) == 3
    expected = keras.ops.convert_to_numpy(model(images, training=False)["boxes"])
    np.testing.assert_allclose(calls[-1], expected, rtol=1e-5)


def test_classification_batch_matches_synthetic_arrays():
    spec = cvbench_model("resnet18", image_size=32, num_classes=7)
    x, y = synthetic_batch(spec, 3, seed=5, on_device=False)
    assert x.shape == (3, 32, 32, 3) and x.dtype == np.float32
    assert y.shape == (3,) and y.dtype == np.int32 and set(y.tolist()) <= set(range(7))
    again = synthetic_batch(spec, 3, seed=5)  # on the device: the same values
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(again[0]), x)
    with pytest.raises(ValueError, match="batch_size"):
        synthetic_batch(spec, 0)


def test_detection_batch_carries_real_ssd_targets():
    spec = cvbench_model("ssd320", image_size=64, num_classes=3)
    assert spec.kind == "detection" and spec.num_classes == 3
    images, targets = synthetic_batch(spec, 2, seed=0, on_device=False)
    # Anchors at 64 px: maps 8, 4, 2, 1, 1 (strides 8..128) x 6 anchors = 86 x 6 = 516.
    assert images.shape == (2, 64, 64, 3) and images.min() >= 0 and images.max() <= 255
    assert targets["boxes"].shape == (2, 516, 5)
    assert targets["classes"].shape == (2, 516, 4)  # 3 one-hot columns + the weight
    positives = targets["boxes"][..., 4].sum(axis=1)
    assert (positives >= 1).all()  # every box is forced onto its best anchor
    one_hot = targets["classes"][..., :3].sum(axis=-1)
    np.testing.assert_array_equal(one_hot, targets["boxes"][..., 4])  # a class iff matched


def test_unknown_model_and_bad_arguments_are_named():
    with pytest.raises(ValueError, match="'resnet51'.*known:.*ssd320"):
        cvbench_model("resnet51")
    with pytest.raises(ValueError, match="mode"):
        benchmark_cvbench("resnet18", mode="serve")
    with pytest.raises(ValueError, match="window_steps"):
        benchmark_cvbench("resnet18", window_steps=0)


def test_latency_skips_the_sizes_that_run_out_of_memory(monkeypatch):
    class Fake:
        def call(self):
            pass

    def fake_inference(model, network, *, batch_size, **kwargs):
        if batch_size >= 64:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 9 GiB")
        return Fake()

    monkeypatch.setattr(run, "cvbench_inference", fake_inference)
    spec = cvbench_model("resnet18", image_size=32)
    result = measure_latencies(
        spec, None, batch_sizes=(1, 8, 64, 256), precision="fp32", warmup_calls=0, calls=3
    )
    assert [lat.batch_size for lat in result.latencies] == [1, 8]
    assert result.skipped == {64: "out of memory", 256: "out of memory"}
    assert result.precision == "float32" and not result.postprocessing

    def broken(model, network, *, batch_size, **kwargs):
        raise RuntimeError("a real bug")

    monkeypatch.setattr(run, "cvbench_inference", broken)
    with pytest.raises(RuntimeError, match="a real bug"):
        measure_latencies(spec, None, batch_sizes=(1,), precision="fp32")


def test_out_of_memory_messages_of_each_framework():
    assert is_out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: out of memory"))
    assert is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_out_of_memory(ValueError("shapes do not match"))


def test_spec_replace_keeps_the_recipe():
    spec = cvbench_model("inception_v3", image_size=80)
    assert spec.image_size == 80 and spec.num_classes == 1000
    assert spec.kind == spec.task.name == "classification"
    assert spec.optimizer.name == "lars"  # the Inception V3 recipe
    # A variant replaces the builder (as the suite's do) and keeps the task's recipe.
    variant = dataclasses.replace(spec, build=tiny_classifier)
    assert variant.schedule == spec.schedule and variant.build is tiny_classifier
    assert spec.build == spec.task.build_model


@pytest.mark.slow  # compiles ResNet-18 (~10 s on TensorFlow, ~45 s on JAX CPU here)
def test_benchmark_cvbench_reports_every_window():
    lines = []
    result = benchmark_cvbench(
        "resnet18",
        mode="inference",
        batch_size=2,
        image_size=32,
        num_classes=4,
        precision="fp32",
        warmup_steps=1,
        steps=5,  # rounded down to 2 windows of 2 steps
        window_steps=2,
        report=lines.append,
    )
    assert result.mode == "inference" and result.implementation == "cvbench"
    assert result.throughput.window_steps == 2 and len(result.throughput.window_rates) == 2
    assert [line.split()[0] for line in lines] == ["3", "5"]  # steps done after each window
    assert result.throughput.format().startswith("Images/sec: ")
