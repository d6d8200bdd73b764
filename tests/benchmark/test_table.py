"""Result tables and JSON: exact rows, ratios, SSD320 against ResNet-50, skipped sizes."""

from __future__ import annotations

import json
import math

import pytest

from cvbench.benchmark.results import LatencyResult, ThroughputResult, jsonable, ratio
from cvbench.benchmark.table import latency_table, throughput_table
from cvbench.benchmark.timing import Latency, Throughput

pytestmark = pytest.mark.backend_agnostic


def _result(model, impl, rate, *, mode="train", stderr=float("nan"), compile_s=10.0):
    t = Throughput(rate, stderr, 0.0, (rate,), 5, 256, compile_s, 1.0, 5, rate / 2)
    return ThroughputResult(model, mode, impl, "mixed_float16", 256, 224, t)


def test_throughput_rows_give_ratios_for_every_reference():
    table = throughput_table(
        [
            _result("resnet50", "cvbench", 5500.0, stderr=12.25),
            _result("resnet50", "keras.applications", 4400.0, compile_s=20.4),
            _result("resnet50", "torchvision", 3000.0, compile_s=2.6),
            _result("ssd320", "cvbench", 880.0),
        ]
    ).splitlines()
    assert table[0] == (
        "| model | mode | precision | batch | image | cvbench img/s | keras.applications img/s "
        "| cvbench / keras.applications | torchvision img/s | cvbench / torchvision "
        "| compile s | note |"
    )
    assert table[1] == "|" + "---|" * 12
    # 5500 / 4400 = 1.25; 5500 / 3000 = 1.83; compile seconds rounded: 10 / 20 / 3.
    assert table[2] == (
        "| resnet50 | train | mixed_float16 | 256 | 224 | 5500.0 ± 12.2 | 4400.0 | 1.25x "
        "| 3000.0 | 1.83x | 10 / 20 / 3 |  |"
    )
    # SSD320 has no reference; its note compares it with ResNet-50: 880 / 5500 = 0.16.
    assert table[3] == (
        "| ssd320 | train | mixed_float16 | 256 | 224 | 880.0 | - | - | - | - | 10 "
        "| 0.16x resnet50 train |"
    )


def test_inference_rows_have_no_detection_note_and_only_present_references():
    table = throughput_table(
        [
            _result("resnet50", "cvbench", 100.0, mode="inference"),
            _result("ssd320", "cvbench", 10.0, mode="inference"),
        ]
    ).splitlines()
    assert "keras.applications" not in table[0]
    assert table[3].endswith("| 10 |  |")


def test_latency_rows_and_skipped_sizes():
    lat = Latency(8, 20, 12.5, {50: 12.0, 90: 13.0, 95: 14.0, 99: 15.5}, 640.0, 3.0)
    result = LatencyResult("ssd320", "cvbench", "float32", 320, True, (lat,), {64: "out of memory"})
    rows = latency_table([result]).splitlines()
    assert rows[2] == (
        "| ssd320 (+ post-processing) | float32 | 320 | 8 | 12.00 | 13.00 | 14.00 | 15.50 "
        "| 640.0 | 20 |"
    )
    assert (
        rows[3] == "| ssd320 (+ post-processing) | float32 | 320 | 64 | out of memory | | | | | |"
    )
    assert rows[3].count("|") == rows[2].count("|")
    as_dict = result.to_dict()
    assert as_dict["skipped"] == {"64": "out of memory"}
    assert as_dict["latencies"][0]["percentiles_ms"] == {
        "p50": 12.0,
        "p90": 13.0,
        "p95": 14.0,
        "p99": 15.5,
    }


def test_json_is_strict_and_ratios_guard_zero():
    result = _result("resnet50", "cvbench", 10.0)
    text = json.dumps(jsonable(result.to_dict()), allow_nan=False)
    assert json.loads(text)["stderr"] is None
    assert json.loads(text)["images_per_sec"] == 10.0
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(1.0, 0.0))


def test_variant_columns_compare_with_cvbench():
    table = throughput_table(
        [
            _result("resnet50", "cvbench", 10.0),
            _result("resnet50", "cvbench+plain_conv", 13.0, compile_s=12.0),
            _result("resnet50", "keras.applications", 11.0, compile_s=30.0),
        ]
    ).splitlines()
    assert "| cvbench+plain_conv img/s | cvbench+plain_conv / cvbench |" in table[0]
    assert table[0].index("cvbench+plain_conv") < table[0].index("keras.applications")
    # 13 / 10 = 1.30 for the variant; 10 / 11 = 0.91 for cvbench against the reference.
    assert table[2] == (
        "| resnet50 | train | mixed_float16 | 256 | 224 | 10.0 | 13.0 | 1.30x | 11.0 | 0.91x "
        "| 10 / 12 / 30 |  |"
    )
