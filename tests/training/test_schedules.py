import math

import keras
import pytest

from cvbench.training.config import ScheduleConfig
from cvbench.training.schedules import WarmupSchedule, build_schedule

pytestmark = pytest.mark.backend_agnostic


def lr(schedule, step):
    return float(keras.ops.convert_to_numpy(schedule(step)))


def test_base_rate_is_per_256_images_and_warmup_is_linear_from_zero():
    # Peak = 0.256 * 512 / 256 = 0.512; warmup 2 epochs x 5 steps = 10 steps; 110 steps.
    s = build_schedule(
        ScheduleConfig(base_lr=0.256, warmup_epochs=2, decay="cosine"),
        global_batch=512,
        steps_per_epoch=5,
        epochs=22,
    )
    assert s.peak_lr == pytest.approx(0.512)
    assert (s.warmup_steps, s.total_steps) == (10, 110)
    assert lr(s, 0) == pytest.approx(0.0)
    assert lr(s, 5) == pytest.approx(0.256)  # halfway up the warmup
    assert lr(s, 10) == pytest.approx(0.512)  # peak; cosine starts (t = 0)
    assert lr(s, 60) == pytest.approx(0.256, rel=1e-6)  # t = 50/100: (1 + cos(pi/2)) / 2
    assert lr(s, 85) == pytest.approx(0.512 * (1 + math.cos(math.pi * 0.75)) / 2, rel=1e-6)
    assert lr(s, 110) == pytest.approx(0.0, abs=1e-7)
    assert lr(s, 500) == pytest.approx(0.0, abs=1e-7)  # clipped after the end


def test_warmup_start_factor_as_in_the_ssd_recipe():
    # SSD320: warmup starts at 0.43332 x base and lasts 1000 of 12,500 steps.
    s = WarmupSchedule(0.16, warmup_steps=1000, total_steps=12500, warmup_start_factor=0.43332)
    assert lr(s, 0) == pytest.approx(0.16 * 0.43332)
    assert lr(s, 500) == pytest.approx(0.16 * (0.43332 + (1 - 0.43332) * 0.5))
    assert lr(s, 1000) == pytest.approx(0.16)


def test_polynomial_power_two():
    # NVIDIA's Horovod script: (1 - t)^2 down to 0 over the run, no warmup.
    s = WarmupSchedule(2.0, total_steps=100, decay="polynomial", power=2.0)
    assert lr(s, 0) == pytest.approx(2.0)
    assert lr(s, 25) == pytest.approx(2.0 * 0.75**2)  # 1.125
    assert lr(s, 50) == pytest.approx(0.5)
    assert lr(s, 100) == pytest.approx(0.0)


def test_end_factor():
    s = WarmupSchedule(1.0, total_steps=10, decay="polynomial", power=1.0, end_factor=0.1)
    assert lr(s, 5) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr(s, 10) == pytest.approx(0.1)


def test_step_decay_at_epoch_boundaries():
    s = build_schedule(
        ScheduleConfig(base_lr=0.1, decay="step", boundaries_epochs=(30, 60, 80)),
        global_batch=256,
        steps_per_epoch=10,
        epochs=90,
    )
    assert s.boundaries == [300, 600, 800]
    assert lr(s, 299) == pytest.approx(0.1)
    assert lr(s, 300) == pytest.approx(0.01)
    assert lr(s, 600) == pytest.approx(0.001)
    assert lr(s, 899) == pytest.approx(0.0001)


def test_warmup_longer_than_the_run_only_rises():
    s = build_schedule(
        ScheduleConfig(base_lr=0.256, warmup_epochs=8),
        global_batch=256,
        steps_per_epoch=2,
        epochs=1,
    )
    assert lr(s, 1) == pytest.approx(0.256 / 16)


def test_config_round_trip():
    s = WarmupSchedule(0.5, warmup_steps=3, total_steps=9, decay="step", boundaries=[5, 7])
    again = WarmupSchedule.from_config(s.get_config())
    assert [lr(again, k) for k in range(10)] == pytest.approx([lr(s, k) for k in range(10)])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"decay": "linear"}, "decay"),
        ({"decay": "step"}, "boundaries_epochs"),
        ({"base_lr": -1.0}, "base_lr"),
        ({"boundaries_epochs": (3, 2)}, "increasing"),
        ({"warmup_steps": -2}, "warmup_steps"),
        ({"reference_batch": 0}, "reference_batch"),
    ],
)
def test_bad_schedule_configs_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScheduleConfig(**kwargs)


def test_build_schedule_rejects_bad_sizes():
    with pytest.raises(ValueError, match="steps_per_epoch"):
        build_schedule(ScheduleConfig(), global_batch=256, steps_per_epoch=0, epochs=1)


def test_defaults_of_the_schedule_itself():
    # WarmupSchedule(1.0): no warmup, total_steps=1, cosine to 0: 1.0 at step 0, 0.0 from 1.
    s = WarmupSchedule(1.0)
    assert (lr(s, 0), lr(s, 1)) == (pytest.approx(1.0), pytest.approx(0.0, abs=1e-7))
    # Default power 2: at t = 2/4, (1 - 0.5)^2 = 0.25 (power 3 would give 0.125).
    assert lr(WarmupSchedule(1.0, total_steps=4, decay="polynomial"), 2) == pytest.approx(0.25)
    # Default warmup from 0: step 1 of 4 is 2.0 * 1/4 = 0.5.
    assert lr(WarmupSchedule(2.0, warmup_steps=4, total_steps=8), 1) == pytest.approx(0.5)
    # Default decay_rate 0.1: 2.0 before the boundary, 2.0 * 0.1 = 0.2 from it.
    s = WarmupSchedule(2.0, total_steps=8, decay="step", boundaries=[3])
    assert (lr(s, 2), lr(s, 3)) == (pytest.approx(2.0), pytest.approx(0.2))


def test_edge_values_the_checks_accept():
    # A peak of 0 (a frozen run), a one-step run and no warmup are all valid.
    assert lr(WarmupSchedule(0.0, total_steps=5), 2) == 0.0
    assert lr(WarmupSchedule(0.5, total_steps=1, decay="constant"), 3) == pytest.approx(0.5)
    assert lr(WarmupSchedule(0.5, warmup_steps=0, total_steps=1), 0) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"decay": "linear"}, "decay must be one of .*'linear'"),
        ({"decay_from": "end"}, "decay_from must be one of .*'end'"),
        ({"warmup_steps": -1}, "warmup_steps=-1"),
        ({"total_steps": 0}, "total_steps=0"),
        ({"peak_lr": -0.1}, "peak_lr must be >= 0, got -0.1"),
        ({"decay": "step", "boundaries": [5, 5]}, r"increasing, got \[5, 5\]"),  # not strictly
        ({"decay": "step", "boundaries": [3, 2]}, r"increasing, got \[3, 2\]"),
        ({"decay": "step"}, "needs boundaries"),
    ],
)
def test_bad_schedule_arguments_name_the_value(kwargs, message):
    # The schedule's own checks (not the config's): a schedule built by hand.
    with pytest.raises(ValueError, match=message):
        WarmupSchedule(**{"peak_lr": 1.0, "total_steps": 10, **kwargs})


@pytest.mark.parametrize(
    "decay, mid", [("cosine", 1.25), ("polynomial", 1.25)], ids=["cosine", "polynomial"]
)
def test_end_factor_is_a_fraction_of_a_non_unit_peak(decay, mid):
    # peak 2.0, end_factor 0.25: end = 0.25 * 2.0 = 0.5 (0.25 / 2.0 = 0.125 would be wrong).
    # Halfway (t = 5/10): cosine 0.5 + (2.0 - 0.5) * (1 + cos(pi/2)) / 2 = 1.25;
    # polynomial power 1: 0.5 + 1.5 * (1 - 0.5) = 1.25.
    s = WarmupSchedule(2.0, total_steps=10, decay=decay, power=1.0, end_factor=0.25)
    assert lr(s, 0) == pytest.approx(2.0)
    assert lr(s, 5) == pytest.approx(mid)
    assert lr(s, 10) == pytest.approx(0.5)
    assert lr(s, 40) == pytest.approx(0.5)  # clipped at the end rate


def test_decay_from_start_spans_the_whole_run():
    # warmup 20 of 100 steps, linear decay (power 1). decay_from="start": t = step / 100, so
    # step 20 -> 1 - 0.2 = 0.8 (the rate drops right after the warmup), step 60 -> 0.4.
    # decay_from="warmup_end": t = (step - 20) / 80, step 20 -> 1.0, step 60 -> 0.5.
    kwargs = dict(warmup_steps=20, total_steps=100, decay="polynomial", power=1.0)
    start = WarmupSchedule(1.0, decay_from="start", **kwargs)
    after = WarmupSchedule(1.0, decay_from="warmup_end", **kwargs)
    assert (lr(start, 10), lr(after, 10)) == (pytest.approx(0.5), pytest.approx(0.5))
    assert (lr(start, 20), lr(after, 20)) == (pytest.approx(0.8), pytest.approx(1.0))
    assert (lr(start, 60), lr(after, 60)) == (pytest.approx(0.4), pytest.approx(0.5))


def test_a_one_step_decay_after_the_warmup():
    # warmup 9 of 10 steps: the decay spans 10 - 9 = 1 step, so step 9 is the peak (t = 0)
    # and step 10 the end (t = 1/1), not halfway.
    s = WarmupSchedule(1.0, warmup_steps=9, total_steps=10, decay="cosine")
    assert lr(s, 9) == pytest.approx(1.0)
    assert lr(s, 10) == pytest.approx(0.0, abs=1e-7)


def test_constant_decay_after_a_one_step_warmup():
    # warmup_steps=1 starting at 0.5 x peak: step 0 is 0.3 * 0.5 = 0.15; from step 1 on, 0.3.
    s = WarmupSchedule(
        0.3, warmup_steps=1, total_steps=10, decay="constant", warmup_start_factor=0.5
    )
    assert lr(s, 0) == pytest.approx(0.15)
    assert [lr(s, k) for k in (1, 5, 10, 50)] == pytest.approx([0.3] * 4)
