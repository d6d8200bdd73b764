"""`ScheduleConfig(decay_from="start")` is NVIDIA DeepLearningExamples' ResNet-50 v1.5 schedule.

The reference, NVIDIA/DeepLearningExamples at 729963dd, TensorFlow/Classification/ConvNets:

- `utils/learning_rate.py` l.39-42: `rescaled_lr = lr_init * num_gpus * (batch_size / 256)`
  with `batch_size` the per-GPU batch (`runtime/runner.py` l.415), i.e. the base rate times
  global batch / 256;
- l.48: `lr = tf.train.cosine_decay(rescaled_lr, global_step, num_decay_steps)`, i.e.
  `rescaled_lr * (1 + cos(pi * min(step, decay_steps) / decay_steps)) / 2` (alpha 0), from
  step 0 over all the steps;
- l.59-62: `warmup_steps = int(num_batches_per_epoch * lr_warmup_epochs)`,
  `warmup_lr = rescaled_lr * step / warmup_steps`, and the rate is `warmup_lr` while
  `step < warmup_steps`, else the cosine's value at that step (not its start);
- `runtime/runner_utils.py` l.32-34: `num_steps = (num_samples // global_batch_size) * epochs`
  and `num_decay_steps = num_steps`; `runtime/runner.py` l.358: steps per epoch
  `num_steps / num_epochs`;
- the recipe, `resnet50v1.5/training/DGX1_RN50_AMP_90E.sh`: 8 GPUs, `--batch_size=256`,
  `--num_iter=90` epochs, `--lr_init=0.256`, `--lr_warmup_epochs=8`, `--cosine_lr`.

(DLE counts `num_samples` as the first shard's records times the shard count minus one plus
the last shard's: 1,251 x 1,023 + 1,252 = 1,281,025 for the standard 1,024-shard build, not
1,281,167; both give 625 steps of 2,048 and 5,004 of 256.)
"""

import math

import keras
import pytest

from cvbench.training.config import ScheduleConfig
from cvbench.training.schedules import WarmupSchedule, build_schedule

pytestmark = pytest.mark.backend_agnostic

IMAGENET_TRAIN = 1_281_167


def lr(schedule, step):
    return float(keras.ops.convert_to_numpy(schedule(step)))


def dle_learning_rate(step, *, lr_init, num_gpus, batch_size, epochs, warmup_epochs, samples):
    """DLE's `learning_rate_scheduler` with `use_cosine_lr`, transcribed (see the module doc)."""
    steps_per_epoch = samples // (batch_size * num_gpus)
    decay_steps = steps_per_epoch * epochs
    rescaled = lr_init * num_gpus * (batch_size / 256.0)
    warmup_steps = int(steps_per_epoch * warmup_epochs)
    if step < warmup_steps:
        return rescaled * step / warmup_steps
    return rescaled * 0.5 * (1 + math.cos(math.pi * min(step, decay_steps) / decay_steps))


RESNET_90E = ScheduleConfig(base_lr=0.256, warmup_epochs=8, decay="cosine", decay_from="start")


def test_the_resnet50_90_epoch_rate_on_8_gpus_is_dles():
    # 8 x 256 = 2,048 images a step; 1,281,167 // 2,048 = 625 steps an epoch; 90 epochs:
    # 56,250 steps; warmup int(625 x 8) = 5,000 steps; peak 0.256 x 2,048 / 256 = 2.048.
    s = build_schedule(RESNET_90E, global_batch=2048, steps_per_epoch=625, epochs=90)
    assert (s.peak_lr, s.warmup_steps, s.total_steps) == (pytest.approx(2.048), 5000, 56250)
    expected = {
        0: 0.0,  # the warmup starts at 0
        2500: 1.024,  # 2.048 x 2,500 / 5,000
        4999: 2.0475904,  # 2.048 x 4,999 / 5,000: the last warmup step
        # End of the warmup: the cosine at step 5,000 of 56,250, not its peak:
        # 2.048 x (1 + cos(pi x 5,000 / 56,250)) / 2 = 2.048 x (1 + 0.96126170) / 2.
        5000: 2.0083319766,
        28125: 1.024,  # mid-run: 2.048 x (1 + cos(pi / 2)) / 2
        # The last step run, 56,249: 2.048 x (1 - cos(pi / 56,250)) / 2 = 1.6e-9.
        56249: 1.597e-9,
        56250: 0.0,
    }
    for step, rate in expected.items():
        reference = dle_learning_rate(
            step, lr_init=0.256, num_gpus=8, batch_size=256, epochs=90, warmup_epochs=8,
            samples=IMAGENET_TRAIN,
        )  # fmt: skip
        assert reference == pytest.approx(rate, rel=1e-6, abs=1e-9), step
        assert lr(s, step) == pytest.approx(reference, rel=1e-6, abs=1e-6), step


def test_the_resnet50_90_epoch_rate_on_1_gpu_is_dles():
    # 1 x 256: 1,281,167 // 256 = 5,004 steps an epoch, 450,360 steps, 40,032 of warmup,
    # peak 0.256; mid-run (step 225,180) exactly half the peak.
    s = build_schedule(RESNET_90E, global_batch=256, steps_per_epoch=5004, epochs=90)
    assert (s.warmup_steps, s.total_steps) == (40032, 450360)
    for step in (0, 20016, 40031, 40032, 225180, 450359, 450360):
        reference = dle_learning_rate(
            step, lr_init=0.256, num_gpus=1, batch_size=256, epochs=90, warmup_epochs=8,
            samples=IMAGENET_TRAIN,
        )  # fmt: skip
        assert lr(s, step) == pytest.approx(reference, rel=1e-6, abs=1e-6), step
    assert lr(s, 225180) == pytest.approx(0.128, rel=1e-6)


def test_decay_from_warmup_end_is_the_default_and_differs_mid_run():
    # The default cosine spans the 51,250 steps after the warmup: at step 28,125,
    # t = 23,125 / 51,250 and the rate is 2.048 x (1 + cos(pi t)) / 2 = 1.18031, 15.3 %
    # above DLE's 1.024 (the "mid-run LR ~15% higher").
    config = RESNET_90E.replace(decay_from="warmup_end")
    assert ScheduleConfig().decay_from == "warmup_end"
    s = build_schedule(config, global_batch=2048, steps_per_epoch=625, epochs=90)
    assert lr(s, 28125) == pytest.approx(1.1803128670, rel=1e-6)
    assert lr(s, 5000) == pytest.approx(2.048)  # the peak, where DLE has 2.00833


def test_decay_from_start_keeps_the_warmup_start_factor_and_end_factor():
    # 100 steps, warmup 10 from 0.5 x peak; cosine over all 100 steps down to 0.1 x peak.
    s = WarmupSchedule(
        1.0, warmup_steps=10, total_steps=100, warmup_start_factor=0.5, end_factor=0.1,
        decay_from="start",
    )  # fmt: skip
    assert lr(s, 0) == pytest.approx(0.5)
    assert lr(s, 5) == pytest.approx(0.75)  # 0.5 + 0.5 x 5 / 10
    assert lr(s, 50) == pytest.approx(0.55)  # 0.1 + 0.9 x (1 + cos(pi / 2)) / 2
    assert lr(s, 100) == pytest.approx(0.1)
    # The polynomial decay counts from step 0 as well: 0.1 + 0.9 x (1 - 0.5) ** 2 = 0.325.
    p = WarmupSchedule(1.0, warmup_steps=10, total_steps=100, decay="polynomial",
                       end_factor=0.1, decay_from="start")  # fmt: skip
    assert lr(p, 50) == pytest.approx(0.325)


def test_decay_from_round_trips_and_is_checked():
    s = WarmupSchedule(2.0, warmup_steps=3, total_steps=30, decay_from="start")
    again = WarmupSchedule.from_config(s.get_config())
    assert again.decay_from == "start"
    assert [lr(again, k) for k in range(31)] == pytest.approx([lr(s, k) for k in range(31)])
    with pytest.raises(ValueError, match="decay_from.*'begin'"):
        ScheduleConfig(decay_from="begin")
    with pytest.raises(ValueError, match="decay_from.*'begin'"):
        WarmupSchedule(1.0, decay_from="begin")
