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
