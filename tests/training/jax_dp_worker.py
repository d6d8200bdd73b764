"""Runs the JAX data-parallel scenarios in a process of its own (`JAX_NUM_CPU_DEVICES` must be
set before JAX starts) and prints their results as JSON lines; `test_jax_data_parallel.py`
starts it. Not collected."""

from __future__ import annotations

import json
import sys

import keras
import numpy as np
from training_helpers import images, sparse_ce, tiny_classifier

from cvbench.training import TrainConfig, Trainer


def values(model: keras.Model) -> list[np.ndarray]:
    return [np.array(keras.ops.convert_to_numpy(v.value)) for v in model.variables]


def trainer(build, distribution, precision: str = "float32") -> Trainer:
    return Trainer(
        build,
        sparse_ce(),
        schedule=0.01,
        precision=precision,
        distribution=distribution,
        config=TrainConfig(log_every=0, progress_bar=False, seed=3, export=False),
    )


def fit(build, distribution, data, *, batch_size: int, steps: int, **kw) -> Trainer:
    run = trainer(build, distribution, **kw)
    run.fit(data, epochs=1, batch_size=batch_size, steps_per_epoch=steps, shuffle=False)
    return run


def max_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def max_relative(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """The largest |a - b| / max(1, |b|): absolute below 1, relative above (BN variances)."""
    return max(
        float(np.max(np.abs(x - y) / np.maximum(1.0, np.abs(y)))) for x, y in zip(a, b, strict=True)
    )


def equal_runs(build, batch: int, steps: int, side: int = 8, alone: bool = True) -> dict:
    """4 devices x `batch` // 4 rows against 1 device x `batch` rows, and 1 device given only
    the first device's rows (what a device training on its own shard would do)."""
    rng = np.random.default_rng(1)
    data = (
        rng.normal(size=(batch * steps, side, side, 3)).astype("float32"),
        rng.integers(0, 3, batch * steps).astype("int32"),
    )
    many = fit(build, "auto", data, batch_size=batch, steps=steps)
    one = fit(build, "single", data, batch_size=batch, steps=steps)
    start = values(trainer(build, "single").model)
    sharding = many.model.trainable_variables[0].value.sharding
    result = {
        "distribution": many.distribution.name,
        "devices": len(sharding.device_set),
        "replicated": bool(sharding.is_fully_replicated),
        "moved": max_difference(values(one.model), start),
        "vs_single": max_difference(values(many.model), values(one.model)),
        "vs_single_relative": max_relative(values(many.model), values(one.model)),
    }
    if alone:  # the first device's rows of every batch, on one device
        shape = (steps, 4, batch // 4)
        first = tuple(a.reshape(*shape, *a.shape[1:])[:, 0].reshape(-1, *a.shape[1:]) for a in data)
        alone_run = fit(build, "single", first, batch_size=batch // 4, steps=steps)
        result["vs_first_shard"] = max_difference(values(many.model), values(alone_run.model))
    return result


def skip_on_one_device() -> dict:
    """A NaN in the rows of the last device only: the step is skipped on all of them."""
    x, y = images(8, classes=3, seed=2)
    x[6:] = np.nan  # rows 6-7: the 4th device's share of 8 rows
    run = trainer(tiny_classifier, "auto")
    run.prepare(global_batch=8, steps_per_epoch=1, epochs=1)
    before = values(run.model)
    run.fit((x, y), epochs=1, batch_size=8, shuffle=False)
    after = values(run.model)
    return {
        "skipped_steps": run.state["skipped_steps"],
        "step": run.state["step"],
        "changed": max_difference(before, after),
        "finite": all(np.isfinite(v).all() for v in after),
    }


def resnet18_run() -> dict:
    from cvbench.models import resnet18

    def build():
        return resnet18(input_shape=(32, 32, 3), num_classes=3, classifier_activation=None)

    return equal_runs(build, batch=8, steps=2, side=32, alone=False)


def fp16_run() -> dict:
    """mixed_float16 with dynamic loss scaling on 4 devices against one device: the same
    steps taken (none skipped), the same loss scale, weights equal to fp16 rounding."""
    rng = np.random.default_rng(4)
    data = (
        rng.normal(size=(24, 8, 8, 3)).astype("float32"),
        rng.integers(0, 3, 24).astype("int32"),
    )
    runs = {
        name: fit(tiny_classifier, name, data, batch_size=8, steps=3, precision="mixed_float16")
        for name in ("auto", "single")
    }
    start = values(trainer(tiny_classifier, "single", "mixed_float16").model)
    many, one = runs["auto"], runs["single"]

    def scale(run: Trainer) -> float:
        return float(keras.ops.convert_to_numpy(run.optimizer.dynamic_scale))

    return {
        "devices": len(many.model.trainable_variables[0].value.sharding.device_set),
        "policy": many.model.dtype_policy.name,
        "steps": [many.state["step"], one.state["step"]],
        "skipped": [many.state["skipped_steps"], one.state["skipped_steps"]],
        "scales": [scale(many), scale(one)],
        "moved": max_difference(values(one.model), start),
        "vs_single_relative": max_relative(values(many.model), values(one.model)),
    }


def detection_run() -> dict:
    """`DetectionTask` (an SSD with a ResNet-18 backbone at 64 px, synthetic data, trained
    batch norms) on 4 devices against one: one step of 8 images, then the task's evaluation
    (its detections over the global batch)."""
    from cvbench.tasks import DetectionTask, TaskOptions, prepare_run
    from cvbench.tasks.recipes import get_recipe

    recipe = get_recipe("ssd320_v1.2").with_overrides(
        {"detection.backbone": "resnet18", "detection.freeze_batchnorm": False}, reason="test"
    )
    out = {}
    for name in ("auto", "single"):
        options = TaskOptions(model="ssd320", image_size=64, num_classes=3, recipe=recipe,
                              synthetic_steps=1)  # fmt: skip
        run = prepare_run(
            DetectionTask(options), batch_size=8, precision="fp32", distribution=name, seed=5,
            config=TrainConfig(log_every=0, progress_bar=False, seed=5, export=False),
        )  # fmt: skip
        run.fit(epochs=1, evaluate="none")
        out[name] = (run.trainer, values(run.trainer.model), run.evaluate())
    many, one = out["auto"], out["single"]
    return {
        "devices": len(many[0].model.trainable_variables[0].value.sharding.device_set),
        "distribution": many[0].distribution.name,
        "steps": [many[0].state["step"], one[0].state["step"]],
        "vs_single_relative": max_relative(many[1], one[1]),
        "metrics": [many[2], one[2]],
    }


SCENARIOS = {
    "dense": lambda: equal_runs(lambda: tiny_classifier(batchnorm=False), batch=8, steps=3),
    "batchnorm": lambda: equal_runs(tiny_classifier, batch=8, steps=3),
    "skip": skip_on_one_device,
    "resnet18": resnet18_run,
    "fp16": fp16_run,
    "detection": detection_run,
}


def main(names: list[str]) -> None:
    for name in names:
        print(f"RESULT {name} " + json.dumps(SCENARIOS[name]()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
