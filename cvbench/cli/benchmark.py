"""`cvbench benchmark`: a thin command over `cvbench.benchmark.benchmark_cvbench`.

The same code as `benchmarks/train_throughput.py` times the model (the Trainer's compiled
step, or a compiled forward pass) in windows of steps; `Trainer.benchmark` uses the same
timing (`cvbench.training.throughput.measure_throughput`). Under `horovodrun` every rank
runs the command; only rank 0 prints. On the JAX backend training runs on every local device
(`--devices N`: the first N, through `keras.distribution` even for N = 1), as `cvbench train`.

`--json FILE` is eval's `--json` (`cvbench.cli.evaluate`): checked before the model is built
(`cvbench.utils.files.check_output`), it is never the data read, a link, a file cvbench did
not write, or a training's `results.json`; an earlier results file of cvbench (a benchmark's
or an eval's `--json`) is replaced, and the file written is recorded for that
(`files.recording`). A write that fails says the results were printed above.
"""

from __future__ import annotations

import argparse
from typing import Any

from cvbench.cli.args import non_negative_int, positive_int, positive_int_list
from cvbench.cli.backend_args import add_backend_flags, distribution_from_args
from cvbench.cli.errors import CLIError
from cvbench.cli.task_args import add_model_and_data, report_corrupt, task_from_args

#: `cvbench benchmark`'s steps per timed window (one progress line each).
DEFAULT_WINDOW_STEPS = 10
#: Timed calls per batch size of `--latency-batch-sizes`.
DEFAULT_LATENCY_CALLS = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `benchmark` to the `cvbench` command."""
    p = subparsers.add_parser(
        "benchmark",
        help="measure training or inference images/s (mean +/- stderr)",
        description=(
            "Run --burn-in unmeasured steps (at least one, which compiles), then --steps "
            "measured steps in windows of --log-every steps with one host sync per window, "
            "and print `Images/sec: mean +/- stderr (jitter = 1.4826 x MAD)` over the "
            "windows, counting all ranks. The same code as benchmarks/train_throughput.py "
            "(cvbench.benchmark.benchmark_cvbench). --synthetic trains on one random batch "
            "kept on the device; --data-dir reads this rank's TFRecords epoch after epoch."
        ),
    )
    add_model_and_data(p, synthetic_help="one random batch on the device: times the model")
    p.add_argument("--steps", type=positive_int, default=100, help="measured steps (100)")
    p.add_argument(
        "--burn-in",
        type=positive_int,
        default=20,
        help="unmeasured steps, at least 1: the first compiles (20)",
    )
    p.add_argument("--mode", choices=("train", "inference"), default="train", help="what to time")
    p.add_argument(
        "--log-every",
        type=non_negative_int,
        default=DEFAULT_WINDOW_STEPS,
        help=f"steps per timed window, one line each (0: windows of {DEFAULT_WINDOW_STEPS}, "
        f"no lines; default {DEFAULT_WINDOW_STEPS})",
    )
    p.add_argument(
        "--latency-batch-sizes",
        type=positive_int_list,
        default=(),
        help="with --mode inference: also time single calls at these batch sizes, e.g. "
        "1,8,64,256, and print p50/p90/p95/p99 (SSD320 with post-processing)",
    )
    p.add_argument(
        "--latency-calls",
        type=positive_int,
        default=None,
        help=f"with --latency-batch-sizes: timed calls per size ({DEFAULT_LATENCY_CALLS})",
    )
    p.add_argument(
        "--json",
        default=None,
        help="also write the result to this JSON file (replacing only an earlier results file "
        "of cvbench, never an input)",
    )
    add_backend_flags(p)
    p.set_defaults(func=benchmark_command)


def benchmark_command(args: argparse.Namespace) -> int:
    """Runs `cvbench benchmark` through `cvbench.benchmark.benchmark_cvbench`, the code path
    of `benchmarks/train_throughput.py`."""
    if args.devices is not None and args.mode != "train":
        raise CLIError("--devices is for --mode train (inference runs on one device per rank)")
    check_latency_flags(args)
    # First: --backend must be set before Keras starts, jax.distributed before JAX runs.
    distribution = distribution_from_args(args)
    if args.json is not None:
        check_json(args)
    from cvbench.benchmark.run import benchmark_latency
    from cvbench.training.distributed import get_distribution
    from cvbench.utils.cpu import describe_cpu

    dist = get_distribution(distribution)
    seed = 0 if args.seed is None else args.seed
    # The model's recipe resolved as `cvbench train` resolves it: the same model, optimizer,
    # schedule, loss scaling and input size.
    task = task_from_args(args, synthetic_steps=args.burn_in + args.steps)
    say = print if dist.is_chief else (lambda line: None)
    model = {"precision": args.precision, "seed": seed}  # what both measurements build
    result = _throughput(args, task, dist, say=say, model=model)
    measured = result.throughput
    cpu = describe_cpu()
    # training runs on every device of the distribution (JAX: all local devices of each
    # process, the global batch sharded); inference on one device per rank
    devices = dist.num_devices if args.mode == "train" else dist.size
    say("-" * 64)
    say(f"cpu: {cpu}")
    say(f"devices: {devices} ({dist.name}; images/s over all of them)")
    say(measured.format())
    say("-" * 64)
    latency = None
    if args.latency_batch_sizes:
        calls = args.latency_calls or DEFAULT_LATENCY_CALLS
        latency = benchmark_latency(
            task, batch_sizes=args.latency_batch_sizes, calls=calls, **model
        )
        from cvbench.benchmark.table import latency_table

        say(latency_table([latency]))
    skipped = report_corrupt(args, task, dist)
    if dist.is_chief and args.json:
        from cvbench.cli.evaluate import results_printed_above

        where = {"ranks": dist.size, "devices": devices, "cpu": cpu}
        with results_printed_above():  # a full disk now loses no result
            _write_summary(args.json, result, latency, where=where, skipped=skipped)
    return 0


def check_latency_flags(args: argparse.Namespace) -> None:
    """Refuses a latency flag given where it has no effect (the rule of the data flags,
    `task_args.check_data_flags`): `--latency-batch-sizes` without `--mode inference`, and
    `--latency-calls` without `--latency-batch-sizes` (no latency is timed).

    Raises:
        CLIError: naming the flag and what it needs (exit 2).
    """
    if args.latency_batch_sizes and args.mode != "inference":
        raise CLIError(
            f"--latency-batch-sizes needs --mode inference: it has no effect with --mode "
            f"{args.mode}"
        )
    if args.latency_calls is not None and not args.latency_batch_sizes:
        raise CLIError(
            "--latency-calls needs --latency-batch-sizes (and --mode inference): no latency "
            "is timed without it"
        )


def check_json(args: argparse.Namespace) -> None:
    """Refuses, before the model is built, a `--json` that is (or holds) the data read, a
    link, an existing file cvbench did not write, or a training's `results.json`; and a file
    or a read-only folder in its way (the `--json` rule of eval, `check_json_path`).

    Raises:
        ValueError: naming the path (exit 2).
        OSError: a file where a folder is, a read-only folder (exit 1).
    """
    from cvbench.cli.evaluate import check_json_path

    inputs = [] if args.data_dir is None else [args.data_dir]
    check_json_path(args.json, inputs=inputs, command="benchmark")


def _throughput(
    args: argparse.Namespace, task: Any, dist: Any, *, say: Any, model: dict[str, Any]
) -> Any:
    """`benchmark_cvbench` of the task with the command's steps and windows, reading
    --data-dir's batches epoch after epoch (else one synthetic batch), a line per window with
    --log-every."""
    from cvbench.benchmark.run import benchmark_cvbench
    from cvbench.training.step_timing import endless_batches

    batch_size = task.recipe.run.batch_per_gpu
    batches = None
    if args.data_dir is not None:
        data = task.train_data(batch_size=batch_size, distribution=dist, seed=model["seed"])
        batches = endless_batches(data.data)
    if args.log_every:
        say(f"{'step':>6} {'img/s':>10}")
    return benchmark_cvbench(
        task,
        mode=args.mode,
        batch_size=batch_size,
        warmup_steps=args.burn_in,
        steps=args.steps,
        window_steps=args.log_every or DEFAULT_WINDOW_STEPS,
        batches=batches,
        distribution=dist,
        report=(lambda line: say(line)) if args.log_every else None,
        **model,
    )


def _write_summary(
    path: str, result: Any, latency: Any, *, where: dict[str, Any], skipped: int | None
) -> None:
    """The --json file: the result, NVIDIA's summary fields, where it ran (`where`: ranks,
    devices, cpu), the latencies, and with --skip-corrupt the corrupt records skipped."""
    from cvbench.benchmark.results import jsonable
    from cvbench.utils.files import recording
    from cvbench.utils.io import write_json_atomic

    measured = result.throughput
    summary = {
        **result.to_dict(),
        # NVIDIA's summary fields, as `Images/sec: mean +/- stderr (jitter = ...)`.
        "mean": measured.images_per_sec,
        "stderr": measured.stderr,
        "jitter": measured.jitter,
        "steps": len(measured.window_rates) * measured.window_steps,
        "global_batch": measured.images_per_step,
        **where,
        "latency": None if latency is None else latency.to_dict(),
    }
    if skipped is not None:
        summary["corrupt_records"] = skipped
    with recording(path):  # cvbench's own: a rerun may replace it
        write_json_atomic(path, jsonable(summary))
