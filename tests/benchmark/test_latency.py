"""Latency percentiles and per-call timing with a fake clock."""

from __future__ import annotations

import pytest

from cvbench.benchmark.latency import PERCENTILES, latency_percentiles, measure_latency

pytestmark = pytest.mark.backend_agnostic


class FakeClock:
    """A clock that workloads advance by the seconds their steps 'take'."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


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
