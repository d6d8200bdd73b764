"""Building and timing cvbench's own workloads: the code path of `cvbench benchmark`.

`cvbench_training` and `cvbench_inference` build the workloads; `benchmark_cvbench` times
one of them with `measure_throughput` (the timing `Trainer.benchmark` uses too, there with
windows of one step); `measure_latencies` times single inference calls per batch size.
`benchmarks/train_throughput.py` (its `throughput_suite`) uses the same functions and adds
the references side by side.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import keras

from cvbench.benchmark.latency import measure_latency
from cvbench.benchmark.results import CVBENCH, LatencyResult, ThroughputResult
from cvbench.benchmark.workloads import (
    CvbenchModel,
    Forward,
    TrainSteps,
    cvbench_model,
    make_trainer,
    synthetic_batch,
    to_device,
)
from cvbench.training.distributed import get_distribution
from cvbench.training.inputs import split_batch
from cvbench.training.precision import build_model_with_policy, resolve_precision
from cvbench.training.throughput import measure_throughput

MODES = ("train", "inference")


def cvbench_training(
    model: CvbenchModel,
    *,
    batch_size: int,
    precision: str,
    planned_steps: int,
    batches: Iterable | None = None,
    jit_compile: bool | str = "auto",
    distribution: Any = "auto",
    seed: int = 0,
) -> tuple[TrainSteps, Any]:
    """A `TrainSteps` workload over a `Trainer` set up as `cvbench train` sets it up.

    Args:
        model: the cvbench model.
        batch_size: images per step and rank.
        precision: as the Trainer's.
        planned_steps: steps the schedule is set up for.
        batches: an iterable of `(x, y)` batches of this rank (e.g. from TFRecords); None:
            one synthetic batch on the device, repeated.
        jit_compile: as `make_trainer`'s.
        distribution: as the Trainer's.
        seed: model initialization and synthetic data seed.

    Returns:
        `(workload, trainer)`.
    """
    trainer = make_trainer(
        model, precision=precision, jit_compile=jit_compile, distribution=distribution, seed=seed
    )
    global_batch = batch_size * trainer.size
    # The Trainer's own set-up for training (optimizer, loss scaling, rank sync), no fit.
    trainer.prepare(global_batch=global_batch, steps_per_epoch=planned_steps, epochs=1)
    if batches is None:
        batches = itertools.repeat(synthetic_batch(model, batch_size, seed=seed))
    return TrainSteps(trainer.training_model, batches, global_batch), trainer


def inference_model(model: CvbenchModel, precision: str) -> keras.Model:
    """The cvbench model built under `precision` (random weights) for inference."""
    return build_model_with_policy(model.build, resolve_precision(precision))


def ssd_postprocess(model: CvbenchModel) -> Callable[[Any], Any]:
    """SSD320's post-processing with its task's detection settings (`Decoder`: decode over
    the anchors, per-class NMS) as `outputs -> detections` (`DetectionTask.postprocess`)."""
    return model.task.postprocess()


def cvbench_inference(
    model: CvbenchModel,
    network: keras.Model,
    *,
    batch_size: int,
    images: Any = None,
    jit_compile: bool | str = "auto",
    seed: int = 0,
) -> Forward:
    """A `Forward` workload of `network` on `images`, by default a synthetic batch of
    `batch_size`, with the task's post-processing (`task.postprocess()`: SSD's decoding and
    NMS; none for a classifier)."""
    if images is None:
        images = synthetic_batch(model, batch_size, seed=seed, on_device=False)[0]
    post = model.task.postprocess()
    return Forward(network, to_device(images), jit_compile=jit_compile, postprocess=post)


def benchmark_cvbench(
    model: str | Any,
    *,
    mode: str = "train",
    batch_size: int = 256,
    image_size: int | None = None,
    num_classes: int | None = None,
    precision: str = "auto",
    warmup_steps: int = 5,
    steps: int = 50,
    window_steps: int = 10,
    batches: Iterable | None = None,
    jit_compile: bool | str = "auto",
    distribution: Any = "auto",
    seed: int = 0,
    report: Callable[[str], None] | None = None,
) -> ThroughputResult:
    """Measures cvbench's training or inference images/s for one model.

    Training runs the Trainer's compiled step (`TrainStepRunner`) after the Trainer's set-up;
    inference a compiled forward pass (SSD320: plus its post-processing on the host). The
    measured `steps` are timed in windows of `window_steps` (see `measure_throughput`).

    Args:
        model: cvbench model name (with its default recipe), or a task
            (`cvbench.tasks.make_task`: its recipe and sizes; `cvbench benchmark --recipe`).
        mode: "train" or "inference".
        batch_size: images per step and rank.
        image_size: input size (default: the model's).
        num_classes: classes (default: the model's data set's).
        precision: "auto", "fp32", "bf16", "fp16" or the policy names.
        warmup_steps: unmeasured steps, the first of them compiling.
        steps: measured steps (rounded down to whole windows, at least one).
        window_steps: steps per timed window.
        batches: batches of this rank (None: a synthetic batch on the device); inference
            uses the first batch's images.
        jit_compile: XLA-compile the steps (True, False, or "auto": on JAX, and on
            TensorFlow with a GPU, unless Horovod runs; XLA is slower on CPU).
        distribution: as the Trainer's ("auto": Horovod under horovodrun).
        seed: initialization and data seed.
        report: called with a progress line after each window (`step img/s`).

    Returns:
        The `ThroughputResult` (images/s over all ranks).

    Raises:
        ValueError: for an unknown model or mode, or non-positive counts.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    for name, value in (("steps", steps), ("window_steps", window_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    spec = cvbench_model(model, image_size=image_size, num_classes=num_classes)
    window_steps = min(window_steps, steps)
    windows = steps // window_steps
    policy = resolve_precision(precision)
    build = {"batch_size": batch_size, "batches": batches, "jit_compile": jit_compile, "seed": seed}
    if mode == "train":
        planned_steps = warmup_steps + windows * window_steps
        workload, _ = cvbench_training(
            spec, precision=policy, planned_steps=planned_steps, distribution=distribution, **build
        )
    else:
        workload = _inference_workload(spec, policy, distribution=distribution, **build)
    try:
        measured = _measure(workload, warmup_steps, windows, window_steps, report)
    finally:
        workload.close()
    return ThroughputResult(
        model=spec.name,
        mode=mode,
        implementation=CVBENCH,
        precision=policy,
        batch_size=batch_size,
        image_size=spec.image_size,
        throughput=measured,
    )


def _measure(
    workload: Any,
    warmup_steps: int,
    windows: int,
    window_steps: int,
    report: Callable[[str], None] | None,
) -> Any:
    """`measure_throughput` of `workload`, `report`ing `step img/s` after each window."""
    on_window = None
    if report is not None:

        def on_window(name: str, index: int, rate: float) -> None:
            report(f"{warmup_steps + (index + 1) * window_steps:6d} {rate:10.1f} img/s")

    return measure_throughput(
        {CVBENCH: workload},
        warmup_steps=warmup_steps,
        windows=windows,
        window_steps=window_steps,
        on_window=on_window,
    )[CVBENCH]


def _inference_workload(
    spec: CvbenchModel,
    policy: str,
    *,
    batch_size: int,
    batches: Iterable | None,
    jit_compile: bool | str,
    distribution: Any,
    seed: int,
) -> Forward:
    """`cvbench_inference` of the model built under `policy`, on the first batch's images
    (else a synthetic batch), its rate counting every rank."""
    images = None
    if batches is not None:
        images = split_batch(next(iter(batches)))[0]
    workload = cvbench_inference(
        spec,
        inference_model(spec, policy),
        batch_size=batch_size,
        images=images,
        jit_compile=jit_compile,
        seed=seed,
    )
    # Every rank runs the same passes: the rate counts all of them, as training's does.
    workload.images_per_step *= get_distribution(distribution).size
    return workload


def benchmark_latency(
    model: str | Any,
    *,
    batch_sizes: Sequence[int] = (1, 8, 64, 256),
    image_size: int | None = None,
    num_classes: int | None = None,
    precision: str = "auto",
    warmup_calls: int = 3,
    calls: int = 20,
    jit_compile: bool | str = "auto",
    seed: int = 0,
) -> LatencyResult:
    """Inference latency percentiles of one cvbench model, by name (`measure_latencies`).

    Args:
        model: cvbench model name, or a task (as `benchmark_cvbench`'s).
        batch_sizes: batch sizes to time, in order (a size that runs out of device memory
            is recorded as skipped, and the larger ones with it).
        image_size: input size (default: the model's).
        num_classes: classes (default: the model's data set's).
        precision: "auto", "fp32", "bf16", "fp16" or the policy names.
        warmup_calls: untimed calls per size after the compiling one.
        calls: timed calls per size.
        jit_compile: as `benchmark_cvbench`'s.
        seed: initialization and data seed.

    Returns:
        The `LatencyResult` (SSD320's calls include its post-processing).

    Raises:
        ValueError: for an unknown model or bad counts.
    """
    spec = cvbench_model(model, image_size=image_size, num_classes=num_classes)
    policy = resolve_precision(precision)
    return measure_latencies(
        spec,
        inference_model(spec, policy),
        batch_sizes=batch_sizes,
        precision=policy,
        warmup_calls=warmup_calls,
        calls=calls,
        jit_compile=jit_compile,
        seed=seed,
    )


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` says the device ran out of memory (JAX, TensorFlow or PyTorch)."""
    text = f"{type(error).__name__}: {error}"
    return any(key in text for key in ("RESOURCE_EXHAUSTED", "ResourceExhausted", "out of memory"))


def measure_latencies(
    model: CvbenchModel,
    network: keras.Model,
    *,
    batch_sizes: Sequence[int],
    precision: str,
    warmup_calls: int = 3,
    calls: int = 20,
    jit_compile: bool | str = "auto",
    seed: int = 0,
) -> LatencyResult:
    """Latency percentiles of single synced inference calls at each batch size.

    SSD320's calls include post-processing. A batch size that runs out of device memory is
    recorded in `skipped` and the larger ones are not tried.
    """
    latencies, skipped = [], {}
    for i, size in enumerate(batch_sizes):
        workload = None
        try:
            workload = cvbench_inference(
                model, network, batch_size=size, jit_compile=jit_compile, seed=seed
            )
            latencies.append(
                measure_latency(workload.call, size, warmup_calls=warmup_calls, calls=calls)
            )
        except Exception as e:  # only out-of-memory errors are handled
            if not is_out_of_memory(e):
                raise
            skipped.update(dict.fromkeys(batch_sizes[i:], "out of memory"))
            break
        finally:
            del workload
            gc.collect()
    return LatencyResult(
        model=model.name,
        implementation=CVBENCH,
        precision=resolve_precision(precision),
        image_size=model.image_size,
        postprocessing=model.task.postprocess() is not None,
        latencies=tuple(latencies),
        skipped=skipped,
    )
