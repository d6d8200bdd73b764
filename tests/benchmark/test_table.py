"""Latency table and result JSON: exact rows, skipped sizes, strict JSON."""

from __future__ import annotations

import json

import pytest

from cvbench.benchmark.latency import Latency
from cvbench.benchmark.results import LatencyResult, ThroughputResult, jsonable
from cvbench.benchmark.table import latency_table
from cvbench.training.throughput import Throughput

pytestmark = pytest.mark.backend_agnostic


def _result(model, impl, rate, *, mode="train", stderr=float("nan"), compile_s=10.0):
    t = Throughput(rate, stderr, 0.0, (rate,), 5, 256, compile_s, 1.0, 5, rate / 2)
    return ThroughputResult(model, mode, impl, "mixed_float16", 256, 224, t)


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


def test_json_is_strict():
    result = _result("resnet50", "cvbench", 10.0)
    text = json.dumps(jsonable(result.to_dict()), allow_nan=False)
    assert json.loads(text)["stderr"] is None
    assert json.loads(text)["images_per_sec"] == 10.0
