import math

import pytest

from cvbench.training.throughput import (
    STEP_HEADER,
    ThroughputMeter,
    format_step_line,
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
