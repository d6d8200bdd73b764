"""run_suite's order, time budget and progress hooks (the measurements themselves faked)."""

from __future__ import annotations

import keras
import pytest

from throughput_suite import suite
from throughput_suite.suite import SuiteConfig, run_suite


@pytest.fixture
def fake_runs(monkeypatch):
    calls = []

    def training(config, model, policy, results, report):
        calls.append(("train", model.name, policy))

    def inference(config, model, policy, results, report):
        calls.append(("inference", model.name, policy))

    monkeypatch.setattr(suite, "_run_training", training)
    monkeypatch.setattr(suite, "_run_inference", inference)
    return calls


@pytest.mark.backend_agnostic
def test_all_training_runs_before_any_inference(fake_runs):
    snapshots = []
    config = SuiteConfig(models=("resnet18", "ssd320"), precisions=("fp32", "bf16"))
    run_suite(config, report=lambda line: None, on_result=lambda r: snapshots.append(r))
    assert fake_runs == [
        ("train", "resnet18", "float32"),
        ("train", "ssd320", "float32"),
        ("train", "resnet18", "mixed_bfloat16"),
        ("train", "ssd320", "mixed_bfloat16"),
        ("inference", "resnet18", "float32"),
        ("inference", "ssd320", "float32"),
        ("inference", "resnet18", "mixed_bfloat16"),
        ("inference", "ssd320", "mixed_bfloat16"),
    ]
    assert len(snapshots) == 8  # the results are handed over after every measurement


@pytest.mark.backend_agnostic
def test_time_budget_skips_what_would_start_late(fake_runs):
    ticks = iter([0.0, 10.0, 70.0, 130.0])  # start, then before each measurement
    config = SuiteConfig(
        models=("resnet18",), precisions=("fp32",), time_budget_s=60.0, latency_batch_sizes=()
    )
    lines = []
    results = run_suite(config, report=lines.append, clock=lambda: next(ticks))
    assert fake_runs == [("train", "resnet18", "float32")]  # started at 10 s
    assert results.skipped == ["resnet18 inference float32: time budget"]  # 70 s > 60 s
    assert lines == ["skipped resnet18 inference float32: time budget"]
    assert results.to_dict()["skipped"] == results.skipped


@pytest.mark.backend_agnostic
def test_train_or_inference_can_be_left_out(fake_runs):
    run_suite(SuiteConfig(models=("resnet18",), precisions=("fp32",), train=False))
    assert fake_runs == [("inference", "resnet18", "float32")]


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(models=()), "models"),
        (dict(precisions=()), "precisions"),
        (dict(batch_size=0), "batch_size"),
        (dict(latency_batch_sizes=(1, 0)), "latency_batch_sizes"),
        (dict(time_budget_s=0), "time_budget_s"),
        (dict(image_size=-3), "image_size"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SuiteConfig(**kwargs)


@pytest.mark.backend_agnostic
def test_unknown_variants_are_named():
    with pytest.raises(ValueError, match=r"\['turbo'\].*plain_conv"):
        SuiteConfig(variants=("plain_conv", "turbo"))
    assert SuiteConfig(variants=("plain_batchnorm",)).variants == ("plain_batchnorm",)


@pytest.mark.slow  # ResNet-18 train steps and forward passes compiled
def test_variants_are_measured_beside_cvbench():
    # Not backend_agnostic: the variants change TensorFlow's computation only.
    config = SuiteConfig(
        models=("resnet18",),
        precisions=("fp32",),
        batch_size=2,
        image_size=32,
        warmup_steps=1,
        windows=1,
        window_steps=1,
        keras_reference=False,
        latency_batch_sizes=(),
        variants=("plain_conv", "plain_batchnorm", "folded_bn"),
    )
    results = run_suite(config, report=lambda line: None)
    rows = [(r.mode, r.implementation) for r in results.throughput]
    # plain_conv changes only gradients: measured in training, not in inference; folded_bn
    # (the served model) cannot train: measured in inference only.
    assert rows == [
        ("train", "cvbench"),
        ("train", "cvbench+plain_conv"),
        ("train", "cvbench+plain_batchnorm"),
        ("inference", "cvbench"),
        ("inference", "cvbench+plain_batchnorm"),
        ("inference", "cvbench+folded_bn"),
    ]
    assert all(r.throughput.images_per_sec > 0 for r in results.throughput)


@pytest.mark.parametrize("depth", [18, 50])
def test_the_resnet_v1_variant_is_the_same_resnet_with_the_stride_in_the_first_1x1(depth):
    from cvbench.models.resnet import build_resnet
    from throughput_suite.suite import as_resnet_v1

    v15 = build_resnet(
        depth=depth, num_classes=5, input_shape=(32, 32, 3), classifier_activation=None
    )
    v1 = as_resnet_v1(v15)
    assert v1.name == v15.name
    assert (v1.input_shape, v1.output_shape) == (v15.input_shape, v15.output_shape)
    assert v1.count_params() == v15.count_params()  # the same layers, only strides moved
    assert v1.layers[-1].get_config()["activation"] == "linear"

    def strides(model):
        return [c.strides for c in model.layers if isinstance(c, keras.layers.Conv2D)]

    # v1.5 strides a stage's first 3x3; v1 its first 1x1 instead (depth 18 has no bottleneck
    # 1x1s, so its basic blocks are the same either way)
    assert (strides(v1) != strides(v15)) == (depth == 50)


def test_the_resnet_v1_variant_names_a_model_that_is_no_resnet():
    from throughput_suite.suite import as_resnet_v1

    net = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten()], name="tiny")
    with pytest.raises(ValueError, match="needs a ResNet, got the model 'tiny'"):
        as_resnet_v1(net)


def test_the_resnet_v1_variant_is_measured_for_resnets_only():
    from cvbench.benchmark.workloads import cvbench_model

    config = SuiteConfig(variants=("resnet_v1", "plain_conv"))
    for name, expected in (
        ("resnet50", ["cvbench", "cvbench+resnet_v1", "cvbench+plain_conv"]),
        ("inception_v3", ["cvbench", "cvbench+plain_conv"]),
    ):
        model = cvbench_model(name, image_size=75)
        assert list(suite._cvbench_variants(config, model, training=True)) == expected, name
