"""NVIDIA's statistics and lines, and the windowed timing with fake workloads and clocks:
exact rates, order, warm-up."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from cvbench.training.throughput import (
    STEP_HEADER,
    Throughput,
    ThroughputMeter,
    block,
    format_step_line,
    measure_throughput,
    summarize,
)

pytestmark = pytest.mark.backend_agnostic


def test_summary_mean_stderr_and_jitter():
    # mean 100; std (ddof=1) = sqrt(200 / 3) = 8.1650, / sqrt(4) = 4.0825;
    # |x - median 100| = 0, 10, 10, 0 -> median 5 -> x 1.4826 = 7.413.
    s = summarize([100.0, 110.0, 90.0, 100.0], global_batch=512)
    assert s.mean == pytest.approx(100.0)
    assert s.stderr == pytest.approx(math.sqrt(200 / 3) / 2)
    assert s.jitter == pytest.approx(7.413)
    assert s.format() == "Images/sec: 100.0 +/- 4.1 (jitter = 7.4)"


def test_stderr_is_nan_with_two_steps_as_in_nvidias_script():
    assert math.isnan(summarize([1.0, 2.0], global_batch=1).stderr)
    with pytest.raises(ValueError, match="no steps"):
        summarize([], global_batch=1)


def test_too_few_rates_say_so_instead_of_nan():
    # Regression: one or two rates printed `Images/sec: 100.0 +/- nan (jitter = 0.0)`.
    assert summarize([100.0], global_batch=8).format() == "Images/sec: 100.0 (one step: no spread)"
    # |x - median 100| = 10, 10 -> median 10 -> x 1.4826 = 14.826.
    assert summarize([90.0, 110.0], global_batch=8).format() == (
        "Images/sec: 100.0 (2 steps: too few for a standard error; jitter = 14.8)"
    )
    one = Throughput(50.0, math.nan, 0.0, (50.0,), 5, 8, 1.0, 0.5, 1, 25.0)
    assert one.format() == "Images/sec: 50.0 (one window: no spread)"
    # Three rates have a standard error: NVIDIA's line. mean 100, std (ddof=1) 10,
    # / sqrt(3) = 5.774; |x - 100| = 10, 0, 10 -> median 10 -> jitter 14.826.
    assert summarize([90.0, 100.0, 110.0], global_batch=8).format() == (
        "Images/sec: 100.0 +/- 5.8 (jitter = 14.8)"
    )


def test_meter_leaves_out_the_burn_in_and_counts_images():
    meter = ThroughputMeter(global_batch=64, burn_in=2)
    assert meter.record(10.0) == pytest.approx(6.4)  # burn-in
    meter.record(10.0)
    assert meter.summary() is None
    assert meter.record(0.5) == pytest.approx(128.0)
    assert meter.record(0.5, images=32) == pytest.approx(64.0)  # a smaller last batch
    assert meter.rates == pytest.approx([128.0, 64.0])
    assert meter.summary().steps == 2


def test_step_line_columns():
    assert STEP_HEADER == "  Step Epoch Img/sec   Loss   LR"
    assert format_step_line(100, 2, 1234.56, 6.7891, 0.123456) == (
        "   100     2  1234.6   6.789 0.12346"
    )


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
    [dict(warmup_steps=-1), dict(windows=0), dict(window_steps=-1), dict(windows=True)],
)
def test_bad_counts_are_rejected(kwargs):
    args = dict(warmup_steps=1, windows=1, window_steps=1) | kwargs
    loads = {"a": FakeWorkload("a", FakeClock(), [], images=1, step_s=1.0, compile_s=0.0)}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        measure_throughput(loads, **args)
    with pytest.raises(ValueError, match="no workloads"):
        measure_throughput({}, warmup_steps=1, windows=1, window_steps=1)


def test_without_warmup_the_first_window_starts_with_the_first_step():
    # Windows of one step each, no warm-up: what `Trainer.benchmark` runs. The first window is
    # the compiling `first_step()` alone (7 s: 32 / 7 img/s); compile time is not separate.
    clock, log = FakeClock(), []
    load = FakeWorkload("a", clock, log, images=32, step_s=0.5, compile_s=7.0)
    result = measure_throughput(
        {"a": load}, warmup_steps=0, windows=3, window_steps=1, clock=clock, cpu_clock=clock
    )["a"]
    assert log == [("a", "first"), ("a", 1), ("a", 1)]
    assert result.window_rates == (32 / 7.0, 64.0, 64.0)
    assert math.isnan(result.compile_seconds) and result.warmup_seconds == 0.0
    # CPU time: 3 x 32 images over the 8 s of the three windows.
    assert result.cpu_images_per_sec == pytest.approx(96 / 8.0)


def test_a_window_counts_the_images_its_steps_had():
    # A workload whose batches shrink (a smaller last batch): `images_per_step` is read after
    # each window, for its rate and for the CPU rate.
    clock, log = FakeClock(), []

    class Halving(FakeWorkload):
        def run(self, steps):
            super().run(steps)
            self.images_per_step //= 2

    load = Halving("a", clock, log, images=32, step_s=1.0, compile_s=0.0)
    result = measure_throughput(
        {"a": load}, warmup_steps=1, windows=2, window_steps=2, clock=clock, cpu_clock=clock
    )["a"]
    # 2 steps x 16 images / 2 s, then 2 x 8 / 2 s; CPU time: (32 + 16) images / 4 s.
    assert result.window_rates == (16.0, 8.0)
    assert result.cpu_images_per_sec == pytest.approx(12.0)
    assert result.images_per_step == 8


def test_block_waits_for_nested_tensors_of_the_backend():
    tree = {
        "a": keras.ops.ones((3, 2)) * 2.0,
        "b": [keras.ops.convert_to_tensor(np.float32(1.0)), None],
        "c": np.zeros((2,), "float32"),
    }
    block(tree)  # returns once computed; nothing to compare but that it accepts every leaf
    assert keras.ops.convert_to_numpy(tree["a"]).sum() == 12.0
