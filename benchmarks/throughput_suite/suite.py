"""The throughput suite of `benchmarks/train_throughput.py`: cvbench beside its references.

For each precision and model: training images/s of cvbench (`cvbench benchmark`'s code
path, `cvbench.benchmark.run`), of keras.applications with plain `model.fit` and, when
asked, of torchvision (PyTorch AMP, channels_last, in a process of its own), their windows
alternating so that the ratios hold on a loaded machine; then inference images/s the same
way; then cvbench's inference latency percentiles per batch size (SSD320 including its
post-processing).
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import keras

from cvbench.benchmark.results import CVBENCH, LatencyResult, ThroughputResult
from cvbench.benchmark.run import (
    cvbench_inference,
    cvbench_training,
    inference_model,
    measure_latencies,
)
from cvbench.benchmark.workloads import CvbenchModel, cvbench_model, synthetic_batch
from cvbench.inference.fold_batchnorm import fold_batchnorm
from cvbench.models.batchnorm import set_fused_batchnorm
from cvbench.models.layers import set_fast_gradients
from cvbench.models.resnet import DEPTHS, build_resnet
from cvbench.training.precision import resolve_precision
from cvbench.training.throughput import measure_throughput
from cvbench.utils.plain_keras import to_plain_keras

from . import reference
from .reference import KERAS, TORCH, TORCH_COMPILE, FitReference, PredictReference
from .workload_process import ProcessWorkload

DEFAULT_MODELS = ("resnet50", "inception_v3", "ssd320")
#: Variants of cvbench measured beside it, name -> function changing a built model, to show
#: what one speed change gains in the same run: "plain_conv" turns off `FastConv2D`'s fast
#: gradients (Keras' own convolution gradients), "plain_batchnorm" turns off
#: `FusedBatchNormalization`'s fused kernel (Keras' own batch norm), "folded_bn" is the model
#: as `cvbench export` serves it (built-in layers, batch norms folded into the convolutions),
#: "resnet_v1" is the same ResNet built as v1 (the stride in the first 1x1 convolution, as
#: keras.applications has it): what the recipe's v1.5 arithmetic costs against the reference.
VARIANTS: dict[str, Callable[[keras.Model], keras.Model]] = {
    "plain_conv": lambda model: set_fast_gradients(model, False),
    "plain_batchnorm": lambda model: set_fused_batchnorm(model, False),
    "folded_bn": lambda model: fold_batchnorm(to_plain_keras(model)),
    "resnet_v1": lambda model: as_resnet_v1(model),
}
#: Variants that change only the gradients: measured in training, not in inference.
TRAINING_ONLY_VARIANTS = ("plain_conv",)
#: Variants of an inference model only (a folded batch norm cannot be trained).
INFERENCE_ONLY_VARIANTS = ("folded_bn",)
#: Variants of the ResNets only (other models are measured without them).
RESNET_ONLY_VARIANTS = ("resnet_v1",)


@dataclass(frozen=True)
class SuiteConfig:
    """What the suite runs.

    Attributes:
        models: cvbench model names.
        precisions: precisions to run ("fp32", "bf16", "fp16", "auto" or policy names).
        batch_size: images per training/inference step of the classifiers.
        detection_batch_size: images per step of SSD320.
        image_size: input size of every model; None: each model's own (224, 299, 320).
        warmup_steps: unmeasured steps per workload (the first compiles).
        windows: timed windows per workload.
        window_steps: steps per window.
        train: measure training.
        inference: measure inference throughput and latency.
        keras_reference: run keras.applications beside the classifiers.
        torch_reference: run torchvision beside the classifiers (needs PyTorch).
        torch_compile: with `torch_reference`, also torchvision through `torch.compile`
            (its own column, in the same alternating windows).
        latency_batch_sizes: batch sizes of the latency measurement (empty: none).
        latency_calls: timed calls per batch size.
        jit_compile: XLA-compile cvbench's steps (True, False or "auto": JAX, or
            TensorFlow with a GPU).
        seed: initialization and data seed.
        time_budget_s: seconds after which no new measurement starts (the ones left are
            listed as skipped); None: no limit.
        variants: variants of cvbench to measure beside it as "cvbench+<name>" (names of
            `VARIANTS`): the same model with one change.
        slowdown: cvbench's steps made this fraction slower on purpose (after each window
            its thread spins `slowdown` x the window's CPU and wall time: `Slowed`), the
            regression check's proof that it catches a slower step; 0: none.
    """

    models: tuple[str, ...] = DEFAULT_MODELS
    precisions: tuple[str, ...] = ("auto",)
    batch_size: int = 256
    detection_batch_size: int = 32
    image_size: int | None = None
    warmup_steps: int = 5
    windows: int = 3
    window_steps: int = 10
    train: bool = True
    inference: bool = True
    keras_reference: bool = True
    torch_reference: bool = False
    torch_compile: bool = False
    latency_batch_sizes: tuple[int, ...] = (1, 8, 64, 256)
    latency_calls: int = 20
    jit_compile: bool | str = "auto"
    seed: int = 0
    time_budget_s: float | None = None
    variants: tuple[str, ...] = ()
    slowdown: float = 0.0

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("models must name at least one model, got ()")
        if not self.precisions:
            raise ValueError("precisions must name at least one precision, got ()")
        for name in ("batch_size", "detection_batch_size", "warmup_steps", "windows"):
            _check_positive(name, getattr(self, name))
        _check_positive("window_steps", self.window_steps)
        _check_positive("latency_calls", self.latency_calls)
        for size in self.latency_batch_sizes:
            _check_positive("latency_batch_sizes entry", size)
        if self.image_size is not None:
            _check_positive("image_size", self.image_size)
        unknown = sorted(set(self.variants) - set(VARIANTS))
        if unknown:
            raise ValueError(
                f"SuiteConfig.variants has unknown names {unknown}; known: {sorted(VARIANTS)}"
            )
        if isinstance(self.slowdown, bool) or not 0 <= self.slowdown < 10:
            raise ValueError(f"SuiteConfig.slowdown must be in [0, 10), got {self.slowdown!r}")
        budget = self.time_budget_s
        if budget is not None and (isinstance(budget, bool) or not budget > 0):
            raise ValueError(f"SuiteConfig.time_budget_s must be > 0 or None, got {budget!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"SuiteConfig.{name} must be a positive int, got {value!r}")


@dataclass
class SuiteResults:
    """Everything a suite run measured, in the order it ran, and what it skipped."""

    throughput: list[ThroughputResult] = field(default_factory=list)
    latency: list[LatencyResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "throughput": [r.to_dict() for r in self.throughput],
            "latency": [r.to_dict() for r in self.latency],
            "skipped": list(self.skipped),
        }


def _batch_size(config: SuiteConfig, model: CvbenchModel) -> int:
    return config.detection_batch_size if model.kind == "detection" else config.batch_size


def _training_workloads(config: SuiteConfig, model: CvbenchModel, policy: str) -> dict:
    batch = _batch_size(config, model)
    planned = config.warmup_steps + config.windows * config.window_steps
    workloads: dict[str, Any] = {}
    for label, variant in _cvbench_variants(config, model, training=True).items():
        workloads[label], _ = cvbench_training(
            variant,
            batch_size=batch,
            precision=policy,
            planned_steps=planned,
            jit_compile=config.jit_compile,
            distribution="single",
            seed=config.seed,
        )
    if config.keras_reference and reference.has_reference(model.name, "keras"):
        network = reference.keras_application(
            model.name,
            image_size=model.image_size,
            num_classes=model.num_classes,
            precision=policy,
        )
        reference.compile_plain(network, model.optimizer, learning_rate=0.01)
        data = synthetic_batch(model, batch, seed=config.seed)
        workloads[KERAS] = FitReference(network, data, batch)
    workloads.update(_torch_workloads(config, model, policy, training=True))
    return workloads


def as_resnet_v1(model: keras.Model) -> keras.Model:
    """A new cvbench ResNet of `model`'s depth, input and classes built as v1 (its weights
    are new: a speed variant); `ValueError` naming the model when it is no ResNet."""
    depth = next((d for d in DEPTHS if model.name == f"resnet{d}"), None)
    if depth is None:
        raise ValueError(f"the resnet_v1 variant needs a ResNet, got the model {model.name!r}")
    activation = model.layers[-1].get_config().get("activation")
    return build_resnet(
        depth=depth,
        variant="v1",
        num_classes=model.output_shape[-1],
        input_shape=model.input_shape[1:],
        classifier_activation=None if activation == "linear" else activation,
    )


def _variant(model: CvbenchModel, name: str) -> CvbenchModel:
    change = VARIANTS[name]
    return dataclasses.replace(model, build=lambda: change(model.build()))


def _cvbench_variants(
    config: SuiteConfig, model: CvbenchModel, *, training: bool
) -> dict[str, CvbenchModel]:
    """cvbench's model and each requested variant of it, by column label."""
    variants = {CVBENCH: model}
    for name in config.variants:
        wrong = TRAINING_ONLY_VARIANTS if not training else INFERENCE_ONLY_VARIANTS
        if name in RESNET_ONLY_VARIANTS and not model.name.startswith("resnet"):
            continue
        if name not in wrong:
            variants[f"{CVBENCH}+{name}"] = _variant(model, name)
    return variants


def _inference_workloads(
    config: SuiteConfig, model: CvbenchModel, policy: str, network: keras.Model
) -> dict:
    batch = _batch_size(config, model)
    workloads: dict[str, Any] = {}
    for label, variant in _cvbench_variants(config, model, training=False).items():
        workloads[label] = cvbench_inference(
            variant,
            network if label == CVBENCH else inference_model(variant, policy),
            batch_size=batch,
            jit_compile=config.jit_compile,
            seed=config.seed,
        )
    if config.keras_reference and reference.has_reference(model.name, "keras"):
        ref = reference.keras_application(
            model.name,
            image_size=model.image_size,
            num_classes=model.num_classes,
            precision=policy,
        )
        images = synthetic_batch(model, batch, seed=config.seed)[0]
        workloads[KERAS] = PredictReference(ref, images)
    workloads.update(_torch_workloads(config, model, policy, training=False))
    return workloads


def _torch_workloads(
    config: SuiteConfig, model: CvbenchModel, policy: str, *, training: bool
) -> dict[str, Any]:
    """torchvision eager and, with `torch_compile`, compiled, by column label."""
    if not (config.torch_reference and reference.has_reference(model.name, "torch")):
        return {}
    labels = {TORCH: False} | ({TORCH_COMPILE: True} if config.torch_compile else {})
    return {
        label: _torch(config, model, policy, training=training, compile=compiled)
        for label, compiled in labels.items()
    }


def _torch(
    config: SuiteConfig, model: CvbenchModel, policy: str, *, training: bool, compile: bool
) -> Any:
    return reference.torch_reference(
        model.name,
        batch_size=_batch_size(config, model),
        image_size=model.image_size,
        num_classes=model.num_classes,
        precision=policy,
        training=training,
        optimizer=model.optimizer,
        seed=config.seed,
        compile=compile,
    )


class Slowed:
    """A workload made slower on purpose: after each `run`, this thread spins until the
    process has spent `fraction` x the run's CPU time more and `fraction` x its wall time
    has passed, so that both its wall rate and its rate per CPU-second drop to at most
    `1 / (1 + fraction)` of the workload's own (a sleep would leave the CPU rate as it was).

    Example:
        >>> class Busy:  # 10 ms of CPU per step
        ...     images_per_step = 4
        ...     def first_step(self): pass
        ...     def run(self, steps):
        ...         end = time.process_time() + 0.01 * steps
        ...         while time.process_time() < end: pass
        ...     def close(self): return "closed"
        >>> slowed = Slowed(Busy(), 0.5)
        >>> cpu = time.process_time(); slowed.run(2); spent = time.process_time() - cpu
        >>> spent >= 0.03  # 0.02 s of steps, then 0.5 x that spun
        True
        >>> slowed.images_per_step, slowed.close()
        (4, 'closed')
    """

    def __init__(self, workload: Any, fraction: float) -> None:
        self.workload = workload
        self.fraction = fraction
        self.images_per_step = workload.images_per_step

    def first_step(self) -> None:
        self.workload.first_step()

    def run(self, steps: int) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.workload.run(steps)
        wall_until = time.perf_counter() + (time.perf_counter() - wall) * self.fraction
        cpu_until = time.process_time() + (time.process_time() - cpu) * self.fraction
        while time.process_time() < cpu_until or time.perf_counter() < wall_until:
            pass

    def close(self) -> Any:
        return self.workload.close()


class WindowCpu:
    """The CPU seconds of each timed window of `measure_throughput`, by workload name.

    Pass `clock` as its `cpu_clock` and `on_window` as its `on_window`: the measurement
    reads the CPU clock at the start and at the end of each window, then reports the window,
    so the last two readings are that window's.

    Example:
        >>> ticks = iter([0.0, 0.5, 0.5, 2.0])
        >>> cpu = WindowCpu(clock=lambda: next(ticks))
        >>> cpu.clock(); cpu.clock(); cpu.on_window("a", 0, 10.0)
        0.0
        0.5
        >>> cpu.clock(); cpu.clock(); cpu.on_window("b", 0, 10.0)
        0.5
        2.0
        >>> cpu.seconds
        {'a': [0.5], 'b': [1.5]}
    """

    def __init__(self, clock: Callable[[], float] = time.process_time) -> None:
        self._clock = clock
        self._readings: list[float] = []
        self.seconds: dict[str, list[float]] = {}

    def clock(self) -> float:
        self._readings.append(self._clock())
        return self._readings[-1]

    def on_window(self, name: str, window: int, rate: float) -> None:
        start, end = self._readings[-2:]
        self.seconds.setdefault(name, []).append(end - start)

    def rates(self, name: str, images: int) -> tuple[float, ...]:
        """Images per CPU-second of each window of `name` (`images` a window; inf for a
        window that took no measurable CPU time)."""
        return tuple(images / s if s > 0 else math.inf for s in self.seconds.get(name, ()))


def _measure(
    config: SuiteConfig, model: CvbenchModel, policy: str, mode: str, workloads: dict
) -> list[ThroughputResult]:
    if config.slowdown:
        workloads = {**workloads, CVBENCH: Slowed(workloads[CVBENCH], config.slowdown)}
    cpu = WindowCpu()
    try:
        measured = measure_throughput(
            workloads,
            warmup_steps=config.warmup_steps,
            windows=config.windows,
            window_steps=config.window_steps,
            cpu_clock=cpu.clock,
            on_window=cpu.on_window,
        )
    finally:
        for workload in workloads.values():
            workload.close()
    return [
        ThroughputResult(
            model=model.name,
            mode=mode,
            implementation=name,
            precision=policy,
            batch_size=_batch_size(config, model),
            image_size=model.image_size,
            throughput=throughput,
            window_cpu_rates=_cpu_rates(cpu, name, workloads[name], config.window_steps),
        )
        for name, throughput in measured.items()
    ]


def _cpu_rates(cpu: WindowCpu, name: str, workload: Any, window_steps: int) -> tuple:
    """The per-window CPU rates of a workload that runs in this process; none for one in a
    process of its own (`ProcessWorkload`: its CPU time is not this process')."""
    if isinstance(workload, ProcessWorkload):
        return ()
    return cpu.rates(name, window_steps * workload.images_per_step)


def _release() -> None:
    keras.backend.clear_session(free_memory=True)
    gc.collect()


def run_suite(
    config: SuiteConfig,
    *,
    report: Callable[[str], None] = print,
    on_result: Callable[[SuiteResults], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SuiteResults:
    """Runs every measurement `config` asks for: all training first, then inference.

    Training comes first because the headline goals are training rates; with a time
    budget, what does not fit is skipped and listed in `SuiteResults.skipped`.

    Args:
        config: the suite.
        report: called with a line of progress after each measurement.
        on_result: called with the results so far after each measurement (e.g. to write
            them, so that an interrupted run keeps what it measured).
        clock: seconds, for the time budget.

    Returns:
        The results, in the order they ran.
    """
    start = clock()
    results = SuiteResults()
    models = [cvbench_model(name, image_size=config.image_size) for name in config.models]
    runs = list(itertools.product(config.precisions, models))
    phases = [("train", config.train), ("inference", config.inference)]
    for mode, wanted in phases:
        for precision, model in runs if wanted else ():
            policy = resolve_precision(precision)
            budget = config.time_budget_s
            if budget is not None and clock() - start > budget:
                results.skipped.append(f"{model.name} {mode} {policy}: time budget")
                report(f"skipped {results.skipped[-1]}")
                continue
            if mode == "train":
                _run_training(config, model, policy, results, report)
            else:
                _run_inference(config, model, policy, results, report)
            if on_result is not None:
                on_result(results)
    return results


def _run_training(
    config: SuiteConfig, model: CvbenchModel, policy: str, results: SuiteResults, report
) -> None:
    rows = _measure(config, model, policy, "train", _training_workloads(config, model, policy))
    results.throughput.extend(rows)
    report(_progress(rows))
    _release()


def _run_inference(
    config: SuiteConfig, model: CvbenchModel, policy: str, results: SuiteResults, report
) -> None:
    # One network for throughput and latency: its compiled forward pass is shared.
    network = inference_model(model, policy)
    workloads = _inference_workloads(config, model, policy, network)
    rows = _measure(config, model, policy, "inference", workloads)
    results.throughput.extend(rows)
    report(_progress(rows))
    if config.latency_batch_sizes:
        latency = measure_latencies(
            model,
            network,
            batch_sizes=config.latency_batch_sizes,
            precision=policy,
            calls=config.latency_calls,
            jit_compile=config.jit_compile,
            seed=config.seed,
        )
        results.latency.append(latency)
        report(_latency_progress(latency))
    del network, workloads
    _release()


def _latency_progress(latency: LatencyResult) -> str:
    parts = [f"batch {x.batch_size} p50 {x.percentiles_ms[50]:.1f} ms" for x in latency.latencies]
    return f"{latency.model} {latency.precision} latency: " + ", ".join(parts)


def _progress(rows: list[ThroughputResult]) -> str:
    first = rows[0]
    parts = [f"{r.implementation} {r.throughput.images_per_sec:.1f}" for r in rows]
    return f"{first.model} {first.mode} {first.precision}: " + ", ".join(parts) + " img/s"
