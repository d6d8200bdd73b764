"""The suite's throughput table: exact rows, ratios, SSD320 against ResNet-50, variants."""

from __future__ import annotations

import math

import pytest

from cvbench.benchmark.results import ThroughputResult
from cvbench.training.throughput import Throughput
from throughput_suite.table import ratio, throughput_table

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


def test_ratios_guard_zero():
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(1.0, 0.0))
