"""Timing primitives with fake workloads and clocks: exact rates, order, percentiles."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from cvbench.benchmark.timing import (
    PERCENTILES,
    block,
    latency_percentiles,
    measure_latency,
    measure_throughput,
)

pytestmark = pytest.mark.backend_agnostic


class FakeClock:
    """A clock that workloads advance by the seconds their steps 'take'."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeWorkload:
    def __init__(self, name, clock, log, *, images, step_s, compile_s, cpu=None, cpu_share=1.0):
        self.name, self.clock, self.log = name, clock, log
        self.images_per_step = images
        self.step_s, self.compile_s = step_s, compile_s
        self.cpu, self.cpu_share = cpu, cpu_share

    def _spend(self, seconds):
        self.clock.now += seconds
        if self.cpu is not None:
            self.cpu.now += seconds * self.cpu_share

    def first_step(self):
        self.log.append((self.name, "first"))
        self._spend(self.compile_s)

    def run(self, steps):
        self.log.append((self.name, steps))
        self._spend(steps * self.step_s)


def test_window_rates_compile_and_warmup_times_are_exact():
    clock, cpu, log = FakeClock(), FakeClock(), []
    fast = FakeWorkload("fast", clock, log, images=32, step_s=0.5, compile_s=7.0, cpu=cpu)
    slow = FakeWorkload(
        "slow", clock, log, images=32, step_s=2.0, compile_s=3.0, cpu=cpu, cpu_share=1.5
    )
    result = measure_throughput(
        {"fast": fast, "slow": slow},
        warmup_steps=3,
        windows=3,
        window_steps=4,
        clock=clock,
        cpu_clock=cpu,
    )
    # fast: 4 steps x 32 images / (4 x 0.5 s) = 64 img/s in every window; slow: 128 / 8 = 16.
    assert result["fast"].window_rates == (64.0, 64.0, 64.0)
    assert result["slow"].window_rates == (16.0, 16.0, 16.0)
    assert result["fast"].images_per_sec == 64.0 and result["fast"].jitter == 0.0
    assert result["fast"].stderr == 0.0  # three equal windows
    assert result["fast"].compile_seconds == 7.0
    assert result["fast"].warmup_seconds == 1.0  # the 2 other warm-up steps x 0.5 s
    assert result["slow"].warmup_seconds == 4.0
    # CPU time: slow burns 1.5 CPU-s per wall second: 3 x 128 images / (24 s x 1.5) = 10.67.
    assert result["slow"].cpu_images_per_sec == pytest.approx(384 / 36)
    assert result["fast"].to_dict()["window_rates"] == [64.0, 64.0, 64.0]


def test_windows_alternate_and_the_order_rotates():
    clock, log = FakeClock(), []
    loads = {n: FakeWorkload(n, clock, log, images=1, step_s=1.0, compile_s=0.0) for n in "abc"}
    measure_throughput(
        loads, warmup_steps=1, windows=3, window_steps=2, clock=clock, cpu_clock=lambda: 0.0
    )
    warmups = [("a", "first"), ("b", "first"), ("c", "first")]
    windows = [(n, 2) for n in "abc" + "bca" + "cab"]
    assert log == warmups + windows


def test_a_load_change_hits_both_workloads_of_a_window_round_alike():
    # The machine slows down 3x from window 2 on: each round measures both at the same speed,
    # so the ratio of the means stays the true 2x.
    clock, log = FakeClock(), []

    class Loaded(FakeWorkload):
        def run(self, steps):
            rounds = sum(1 for entry in log if entry[1] != "first") // 2
            self.log.append((self.name, steps))
            self._spend(steps * self.step_s * (3.0 if rounds >= 1 else 1.0))

    a = Loaded("a", clock, log, images=10, step_s=1.0, compile_s=0.0)
    b = Loaded("b", clock, log, images=10, step_s=2.0, compile_s=0.0)
    result = measure_throughput(
        {"a": a, "b": b},
        warmup_steps=1,
        windows=2,
        window_steps=1,
        clock=clock,
        cpu_clock=lambda: 0.0,
    )
    assert result["a"].window_rates == (10.0, 10.0 / 3)
    assert result["b"].window_rates == (5.0, 5.0 / 3)
    assert result["a"].images_per_sec / result["b"].images_per_sec == pytest.approx(2.0)
    assert math.isnan(result["a"].stderr)  # two windows: NaN, as NVIDIA's summary


@pytest.mark.parametrize(
    "kwargs",
    [dict(warmup_steps=0), dict(windows=0), dict(window_steps=-1), dict(windows=True)],
)
def test_bad_counts_are_rejected(kwargs):
    args = dict(warmup_steps=1, windows=1, window_steps=1) | kwargs
    loads = {"a": FakeWorkload("a", FakeClock(), [], images=1, step_s=1.0, compile_s=0.0)}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        measure_throughput(loads, **args)
    with pytest.raises(ValueError, match="no workloads"):
        measure_throughput({}, warmup_steps=1, windows=1, window_steps=1)


def test_latency_percentiles_interpolate_linearly():
    # 1..100 ms: the p-th percentile of 100 sorted samples is at index p/100 x 99:
    # p50 -> 49.5 -> 50.5 ms, p90 -> 89.1 -> 90.1 ms, p95 -> 94.05 -> 95.05, p99 -> 98.01 -> 99.01.
    samples = [k / 1000 for k in range(100, 0, -1)]  # order does not matter
    assert latency_percentiles(samples) == pytest.approx({50: 50.5, 90: 90.1, 95: 95.05, 99: 99.01})
    assert tuple(latency_percentiles(samples)) == PERCENTILES
    with pytest.raises(ValueError, match="no latency samples"):
        latency_percentiles([])


def test_measure_latency_times_each_call_after_the_warmup():
    clock = FakeClock()
    durations = iter([5.0, 1.0, 1.0, 0.010, 0.020, 0.030, 0.040])  # compile, 2 warm-up, 4 timed

    def call():
        clock.now += next(durations)

    lat = measure_latency(call, 8, warmup_calls=2, calls=4, clock=clock)
    assert lat.compile_seconds == 5.0
    assert lat.calls == 4
    assert lat.mean_ms == pytest.approx(25.0)
    assert lat.images_per_sec == pytest.approx(8 / 0.025)  # 320 img/s
    # 10, 20, 30, 40 ms: p50 at index 1.5 -> 25; p90 at 2.7 -> 37; p99 at 2.97 -> 39.7.
    assert lat.percentiles_ms[50] == pytest.approx(25.0)
    assert lat.percentiles_ms[90] == pytest.approx(37.0)
    assert lat.percentiles_ms[99] == pytest.approx(39.7)
    assert lat.to_dict()["percentiles_ms"]["p95"] == pytest.approx(38.5)
    with pytest.raises(ValueError, match="warmup_calls"):
        measure_latency(call, 8, warmup_calls=-1, calls=1)
    with pytest.raises(ValueError, match="calls"):
        measure_latency(call, 8, warmup_calls=0, calls=0)


def test_block_waits_for_nested_tensors_of_the_backend():
    tree = {
        "a": keras.ops.ones((3, 2)) * 2.0,
        "b": [keras.ops.convert_to_tensor(np.float32(1.0)), None],
        "c": np.zeros((2,), "float32"),
    }
    block(tree)  # returns once computed; nothing to compare but that it accepts every leaf
    assert keras.ops.convert_to_numpy(tree["a"]).sum() == 12.0
