"""`cvbench train --recipe`: each flag sets one knob, the built objects follow the resolved
recipe, the ResNet schedule equals DLE's formula, the run log records the recipe, and SSD320
refuses a random backbone with frozen batch norms."""

from __future__ import annotations

import json
import math

import keras
import pytest

import cvbench.cli as cli
from cvbench.cli.task_args import task_from_args
from cvbench.tasks.recipes import SETTINGS, get_recipe, reference_learning_rate
from cvbench.training import trainer as trainer_module

RN50 = ["--synthetic", "--image-size", "32", "--batch-size", "2", "--precision", "fp32"]


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))


def _args(argv):
    return cli.build_parser().parse_args(["train", *argv])


def _resolve(argv):
    """The recipe `cvbench train argv` resolves (through the command's own task path)."""
    return task_from_args(_args(argv)).recipe


def _new_deviations(resolved, base):
    before = {d.knob: d for d in base.deviations}
    return {d.knob: d.reason for d in resolved.deviations if before.get(d.knob) != d}


@pytest.mark.parametrize(
    ("flags", "knob", "value"),
    [
        (["--batch-size", "64"], "run.batch_per_gpu", 64),
        (["--epochs", "5"], "run.epochs", 5),
        (["--precision", "bf16"], "run.precision", "bf16"),
        (["--lr", "0.5"], "schedule.base_lr", 0.5),
        (["--warmup-epochs", "2"], "schedule.warmup_epochs", 2.0),
        (["--schedule", "polynomial"], "schedule.decay", "polynomial"),
        (["--power", "1.5"], "schedule.power", 1.5),
        (["--decay-from", "warmup_end"], "schedule.decay_from", "warmup_end"),
        (["--optimizer", "lars"], "optimizer.name", "lars"),
        (["--momentum", "0.8"], "optimizer.momentum", 0.8),
        (["--nesterov"], "optimizer.nesterov", True),
        (["--weight-decay", "1e-4"], "optimizer.weight_decay", 1e-4),
        (["--label-smoothing", "0.2"], "loss.label_smoothing", 0.2),
        (["--mixup", "0.4"], "loss.mixup_alpha", 0.4),
        (["--loss-scale", "256"], "loss.loss_scale", 256.0),
        (["--dynamic-loss-scale"], "loss.dynamic_loss_scale", True),
        (["--image-size", "160"], "model.image_size", 160),
        (["--weights", "w.weights.h5"], "model.weights", "w.weights.h5"),
        (["--boundaries", "30,60"], "schedule.boundaries_epochs", (30.0, 60.0)),
    ],
)
def test_each_flag_sets_its_knob_of_the_resnet_recipe(flags, knob, value):
    base = get_recipe("resnet50_v1.5_90e")
    resolved = _resolve(["--model", "resnet50", "--synthetic", *flags])
    assert resolved.name == base.name and resolved.value(knob) == value
    # Only that knob changed, and its deviation names the flag (value != the reference).
    changed = {k for k, v in resolved.knobs() if v != base.value(k)}
    assert changed == {knob}
    assert _new_deviations(resolved, base) == {knob: flags[0]}


def test_num_classes_also_smooths_over_the_models_classes():
    # DLE smooths over 1001 classes for its 1000 outputs; 10 outputs smooth over 10.
    base = get_recipe("resnet50_v1.5_90e")
    resolved = _resolve(["--model", "resnet50", "--synthetic", "--num-classes", "10"])
    changed = {k: v for k, v in resolved.knobs() if v != base.value(k)}
    assert changed == {"model.num_classes": 10, "loss.smoothing_classes": None}
    assert _new_deviations(resolved, base) == {
        "model.num_classes": "--num-classes",
        "loss.smoothing_classes": "--num-classes",
    }


SSD = ["--model", "ssd320", "--synthetic", "--backbone-weights", "b.h5"]


@pytest.mark.parametrize(
    ("flags", "changes"),
    [
        ([], {}),
        (["--batch-size", "8"], {"run.batch_per_gpu": 8}),
        (["--epochs", "2"], {"run.epochs": 2, "run.images": None}),  # counted in epochs now
        (["--weight-decay", "1e-3"], {"detection.l2_weight": 1e-3}),
        (["--image-size", "256"], {"detection.image_size": 256}),
        (["--num-classes", "3"], {"detection.num_classes": 3}),
    ],
)
def test_each_flag_sets_its_knob_of_the_ssd_recipe(flags, changes):
    base = get_recipe("ssd320_v1.2")
    resolved = _resolve([*SSD, *flags])
    expected = {"detection.backbone_weights": "b.h5", **changes}
    assert {k: v for k, v in resolved.knobs() if v != base.value(k)} == expected
    assert _new_deviations(resolved, base) == {
        "detection.backbone_weights": "--backbone-weights",
        **{k: flags[0] for k in changes},
    }


def test_recipe_flag_selects_the_model_and_rejects_another():
    resolved = _resolve(["--recipe", "inception_v3_nvcnn", "--synthetic"])
    assert (resolved.name, resolved.model) == ("inception_v3_nvcnn", "inception_v3")
    resolved = _resolve(["--recipe", "resnet50_v1.5_250e", "--model", "resnet50", "--synthetic"])
    assert resolved.loss.mixup_alpha == 0.2
    with pytest.raises(ValueError, match="recipe 'ssd320_v1.2' trains ssd320, not resnet50"):
        _resolve(["--recipe", "ssd320_v1.2", "--model", "resnet50", "--synthetic"])
    with pytest.raises(ValueError, match="unknown recipe 'rn50'; known: incep"):
        _resolve(["--recipe", "rn50", "--synthetic"])
    with pytest.raises(ValueError, match="--mixup sets no knob of recipe ssd320_v1.2"):
        _resolve([*SSD, "--mixup", "0.2"])
    with pytest.raises(ValueError, match="--backbone-weights sets no knob of recipe resnet18"):
        _resolve(["--model", "resnet18", "--synthetic", "--backbone-weights", "b.h5"])
    assert _resolve(["--model", "resnet18", "--synthetic"]).name == "resnet18_cvbench"


def test_help_names_every_recipe(capsys):
    from cvbench.tasks.recipes import list_recipes

    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in list_recipes())


def test_every_flag_of_the_table_exists():
    parser = cli.build_parser()._subparsers._group_actions[0].choices["train"]
    dests = {a.dest for a in parser._actions}
    assert set(SETTINGS) <= dests, set(SETTINGS) - dests


def test_ssd_without_backbone_weights_stops_with_the_message(capsys):
    code = cli.main(["train", "--model", "ssd320", "--synthetic", "--image-size", "64"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert "every batch norm" in err and "--backbone-weights imagenet" in err
    assert "--backbone-weights PATH" in err


class _Captured:
    """`Trainer.fit` replaced: records the run and sets the Trainer up (builds the optimizer
    and its schedule) without training."""

    def __init__(self, monkeypatch):
        self.calls = []
        captured = self

        def fit(trainer, data, *, epochs, steps_per_epoch=None, batch_size=None, **kwargs):
            trainer.prepare(
                global_batch=batch_size * trainer.size, steps_per_epoch=steps_per_epoch,
                epochs=epochs,
            )  # fmt: skip
            captured.calls.append((trainer, epochs, steps_per_epoch, batch_size))
            return keras.callbacks.History()

        monkeypatch.setattr(trainer_module.Trainer, "fit", fit)


def _learning_rate(optimizer):
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return inner._learning_rate


def test_resnet_recipe_schedule_built_through_the_cli_equals_dle(monkeypatch, capsys):
    captured = _Captured(monkeypatch)
    argv = ["train", "--recipe", "resnet50_v1.5_90e", *RN50, "--steps-per-epoch", "10",
            "--eval", "none", "--no-export", "--log-every", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    ((trainer, epochs, steps, batch),) = captured.calls
    assert (epochs, steps, batch) == (90, 10, 2)  # the recipe's 90 epochs
    line = capsys.readouterr().out
    assert "recipe resnet50_v1.5_90e: global batch 2 = 1 x 2, peak LR 0.002 (0.256 x 2 / 256), " \
        "10 steps per epoch, 900 steps, warmup 80 steps from 0, precision float32 (asked)" \
        in line  # fmt: skip
    # The flags that set knobs away from the recipe, with their reasons.
    assert "cvbench: overrides of resnet50_v1.5_90e: run.batch_per_gpu 2 (--batch-size); " \
        "run.precision 'fp32' (--precision); model.image_size 32 (--image-size)" \
        in line  # fmt: skip
    schedule = _learning_rate(trainer.optimizer)
    # DLE utils/learning_rate.py: rescaled = lr_init x global / 256 = 0.256 x 2 / 256 = 0.002;
    # warmup: rescaled x step / warmup_steps, warmup_steps = 8 epochs x 10 = 80; afterwards
    # cosine_decay(rescaled, step, total) = rescaled x (1 + cos(pi step / total)) / 2 with
    # total = 90 x 10 = 900 (from step 0 over all steps, not after the warmup).
    peak, total, warmup = 0.002, 900, 80
    expected = {
        0: 0.0,
        40: peak * 40 / 80,
        warmup: peak * (1 + math.cos(math.pi * 80 / 900)) / 2,  # 0.0019616...
        450: peak * (1 + math.cos(math.pi * 450 / 900)) / 2,  # mid-run: half the peak
        total: 0.0,
    }
    recipe = get_recipe("resnet50_v1.5_90e").with_overrides(
        {"run.batch_per_gpu": 2, "model.image_size": 32, "run.precision": "fp32"},
        reason="test",
    )
    from cvbench.tasks.recipes import plan

    run = plan(recipe, num_gpus=1, train_images=20)
    for step, value in expected.items():
        got = float(schedule(step))
        assert got == pytest.approx(value, rel=1e-6, abs=1e-9), step
        assert got == pytest.approx(reference_learning_rate(recipe, step, run), abs=1e-9)
    assert expected[450] == pytest.approx(0.001)


def test_built_objects_follow_the_flags(monkeypatch):
    captured = _Captured(monkeypatch)
    argv = ["train", "--model", "resnet50", *RN50, "--steps-per-epoch", "2", "--epochs", "3",
            "--momentum", "0.7", "--weight-decay", "1e-4", "--lr", "0.512", "--warmup-epochs",
            "1", "--label-smoothing", "0.2", "--loss-scale", "64", "--schedule", "polynomial",
            "--power", "3", "--decay-from", "warmup_end", "--nesterov", "--eval", "none",
            "--no-export", "--log-every", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    ((trainer, epochs, steps, batch),) = captured.calls
    assert (epochs, steps, batch) == (3, 2, 2)
    opt, sched = trainer._optimizer_spec, trainer._schedule_spec
    assert (opt.name, opt.momentum, opt.nesterov, opt.weight_decay) == ("sgd", 0.7, True, 1e-4)
    assert opt.decay_bias is True  # the recipe's own knob (DLE decays the FC bias)
    # warmup 1 epoch x 2 steps; 0.512 per 256 at the recipe's reference batch.
    assert (sched.base_lr, sched.reference_batch, sched.warmup_steps) == (0.512, 256, 2)
    assert (sched.decay, sched.power, sched.decay_from) == ("polynomial", 3.0, "warmup_end")
    assert (trainer.config.dynamic_loss_scale, trainer.config.loss_scale) == (False, 64.0)
    loss = trainer.training_model.loss_fn
    assert (loss.label_smoothing, loss.smoothing_classes) == (0.2, 1001)
    # The recipe's model knobs reach the builder: BN epsilon 1e-5 and momentum 0.9 (DLE).
    norms = [x for x in trainer.model.layers if isinstance(x, keras.layers.BatchNormalization)]
    bn = norms[0]
    assert (bn.epsilon, bn.momentum) == (1e-5, 0.9)


def test_run_log_records_the_resolved_recipe(tmp_path, monkeypatch):
    captured = _Captured(monkeypatch)  # the Trainer's fit writes the recipe event first
    log_dir = tmp_path / "run"
    argv = ["train", "--recipe", "resnet50_v1.5_90e", *RN50, "--steps-per-epoch", "1",
            "--epochs", "1", "--eval", "none", "--no-export", "--no-progress", "--log-every",
            "0", "--log-dir", str(log_dir)]  # fmt: skip
    assert cli.main(argv) == 0
    ((trainer, *_),) = captured.calls
    (event, entry) = trainer.run_events[0]
    assert event == "recipe"
    entry = json.loads(json.dumps(entry))  # as the run log writes it
    assert entry["recipe"] == "resnet50_v1.5_90e"
    knobs = entry["knobs"]
    assert knobs["run.epochs"] == 1 and knobs["run.batch_per_gpu"] == 2
    assert knobs["schedule.decay_from"] == "start" and knobs["loss.loss_scale"] == 128.0
    assert set(knobs) == {k for k, _ in get_recipe("resnet50_v1.5_90e").knobs()}
    deviations = {d["knob"]: (d["reference"], d["reason"]) for d in entry["deviations"]}
    assert deviations["run.epochs"] == (90, "--epochs")
    assert deviations["run.batch_per_gpu"] == (256, "--batch-size")
    assert deviations["model.image_size"] == (224, "--image-size")
    assert deviations["run.precision"] == ("fp16", "--precision")
    # 8 warmup steps in a 1-step run: capped at 1 // 2 = 0.
    assert entry["plan"] == {
        "num_gpus": 1, "batch_per_gpu": 2, "global_batch": 2, "peak_lr": 0.002,
        "steps_per_epoch": 1, "total_steps": 1, "warmup_steps": 0, "warmup_start_lr": 0.0,
        "lr_rule": "0.256 x 2 / 256", "warmup_capped_from": 8,
    }  # fmt: skip
    assert (entry["precision"], entry["precision_reason"]) == ("float32", "asked")
    assert [o["knob"] for o in entry["overrides"]] == [
        "run.batch_per_gpu", "run.precision", "run.epochs", "model.image_size",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def notop_h5(tmp_path_factory, legacy_h5):
    """keras.applications' ResNet-50 `_notop` file (random weights, legacy HDF5), made here."""
    model = keras.applications.ResNet50(weights=None, include_top=False)
    return legacy_h5(model, tmp_path_factory.mktemp("weights") / "notop.h5", 3)


@pytest.mark.slow
def test_ssd_with_backbone_weights_trains(tmp_path, notop_h5, capsys):
    log_dir = tmp_path / "run"
    argv = ["train", "--model", "ssd320", "--synthetic", "--backbone-weights", str(notop_h5),
            "--image-size", "64", "--batch-size", "2", "--num-classes", "3", "--epochs", "1",
            "--steps-per-epoch", "2", "--precision", "fp32", "--eval", "none", "--no-progress",
            "--log-every", "1", "--log-dir", str(log_dir)]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # 1 epoch of 2 steps at 1 x 2: warmup round(0.08 x 2) = 0 steps.
    assert "recipe ssd320_v1.2: global batch 2 = 1 x 2, peak LR 0.00125 (0.16 x 2 / 256), 2 " \
        "steps per epoch, 2 steps, warmup 0 steps from 0.00054165, precision float32" \
        in out  # fmt: skip
    events = [json.loads(x) for x in (log_dir / "train_log.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 2 and all(math.isfinite(e["loss"]) for e in steps)
    (recipe,) = [e for e in events if e["event"] == "recipe"]
    assert recipe["knobs"]["detection.backbone_weights"] == str(notop_h5)


def test_backbone_weights_reach_the_ssd(notop_h5, monkeypatch):
    import h5py
    import numpy as np

    captured = _Captured(monkeypatch)
    argv = ["train", "--model", "ssd320", "--synthetic", "--backbone-weights", str(notop_h5),
            "--image-size", "64", "--batch-size", "2", "--num-classes", "3", "--epochs", "1",
            "--steps-per-epoch", "1", "--precision", "fp32", "--eval", "none", "--no-export",
            "--log-every", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    ((trainer, *_),) = captured.calls
    kernels = [
        v for v in trainer.model.weights if "conv2_block1_1_conv" in v.path and "kernel" in v.path
    ]
    with h5py.File(notop_h5, "r") as f:
        group = f["conv2_block1_1_conv"]  # (conv1 takes RGB: its kernel is reordered)
        names = [n.decode() if isinstance(n, bytes) else n for n in group.attrs["weight_names"]]
        stored = next(group[n][()] for n in names if "kernel" in n)
    assert len(kernels) == 1
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(kernels[0]), stored)


@pytest.mark.slow
def test_two_horovod_ranks_scale_the_global_batch_and_print_it(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    horovodrun = Path(sys.executable).with_name("horovodrun")
    cvbench = Path(sys.executable).with_name("cvbench")
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run(
        [str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo", str(cvbench), "train",
         "--recipe", "resnet50_v1.5_90e", *RN50, "--epochs", "1", "--steps-per-epoch", "1",
         "--eval", "none", "--no-export", "--no-progress", "--log-every", "0",
         "--log-dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=500, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # 2 ranks x 2 images = 4; peak 0.256 x 4 / 256 = 0.004; printed by rank 0 only.
    line = (
        "cvbench: recipe resnet50_v1.5_90e: global batch 4 = 2 x 2, peak LR 0.004 (0.256 x 4 / "
        "256), 1 steps per epoch, 1 steps, warmup 0 steps from 0 (capped at half the run: the "
        "recipe's 8-step warmup is longer than the run; --warmup-epochs sets it), precision "
        "float32 (asked)"
    )
    assert [x for x in run.stdout.splitlines() if "cvbench: recipe" in x] == [f"[0]<stdout>:{line}"]
    events = [
        json.loads(x) for x in (tmp_path / "run" / "train_log.jsonl").read_text().split("\n") if x
    ]
    (entry,) = [e for e in events if e["event"] == "recipe"]
    assert (entry["plan"]["num_gpus"], entry["plan"]["global_batch"]) == (2, 4)
    (start,) = [e for e in events if e["event"] == "start"]
    assert (start["ranks"], start["global_batch"]) == (2, 4)
