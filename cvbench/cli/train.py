"""`cvbench train`, `cvbench eval` and `cvbench benchmark`: thin commands over the Trainer.

Each command finds the task of `--model` (`cvbench.training.tasks.task_for_model`), builds a
`Trainer` from the task and the flags, and runs it. Under `horovodrun` every rank runs the
command; only rank 0 prints.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cvbench.cli import CLIError
from cvbench.cli.args import (
    float_list,
    non_negative_float,
    non_negative_int,
    positive_int,
    positive_int_list,
)

_PRECISIONS = ("auto", "fp16", "bf16", "fp32")
#: `cvbench benchmark`'s steps per timed window (one progress line each).
DEFAULT_WINDOW_STEPS = 10


def _add_model_and_data(p: argparse.ArgumentParser, *, synthetic_help: str) -> None:
    p.add_argument("--model", required=True, help="model name, e.g. resnet50, inception_v3")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data-dir", help="directory of ImageNet-format TFRecords (train-*, validation-*)"
    )
    source.add_argument("--synthetic", action="store_true", help=synthetic_help)
    p.add_argument(
        "--batch-size", type=positive_int, default=256, help="images per rank and step (256)"
    )
    p.add_argument(
        "--image-size", type=positive_int, default=None, help="input size (model default)"
    )
    p.add_argument(
        "--num-classes", type=positive_int, default=None, help="classes (1000 for ImageNet)"
    )
    p.add_argument(
        "--precision",
        choices=_PRECISIONS,
        default="auto",
        help="fp16 (mixed float16, dynamic loss scaling), bf16 (mixed bfloat16), fp32, or "
        "auto: fp16 on a GPU, bf16 on a CPU with native bfloat16 (AVX512-BF16 or AMX), fp32 "
        "on other CPUs (default auto)",
    )
    p.add_argument("--seed", type=int, default=None, help="random seed (default: none)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `train`, `eval` and `benchmark` to the `cvbench` command."""
    p = subparsers.add_parser(
        "train",
        help="train a model (Horovod-aware, mixed precision, checkpoints, resume)",
        description=(
            "Train --model on ImageNet TFRecords (--data-dir) or synthetic data, with the "
            "task's reference recipe (ResNet: NVIDIA v1.5 SGD + cosine; Inception V3: LARC + "
            "polynomial) unless flags override it. Under horovodrun every rank runs this "
            "command; rank 0 prints, logs and writes checkpoints under --log-dir."
        ),
    )
    _add_model_and_data(p, synthetic_help="random data (throughput runs, smoke tests)")
    p.add_argument("--epochs", type=positive_int, default=90, help="epochs to train (90)")
    p.add_argument(
        "--steps-per-epoch",
        type=positive_int,
        default=None,
        help="steps per epoch (default: the training set over the global batch; 100 for "
        "synthetic data)",
    )
    p.add_argument(
        "--lr", type=non_negative_float, default=None, help="base learning rate per 256 images"
    )
    p.add_argument("--optimizer", choices=("sgd", "lars"), default=None, help="update rule")
    p.add_argument("--momentum", type=non_negative_float, default=None, help="momentum")
    p.add_argument(
        "--nesterov", action=argparse.BooleanOptionalAction, default=None, help="Nesterov momentum"
    )
    p.add_argument("--weight-decay", type=non_negative_float, default=None, help="L2 weight decay")
    p.add_argument(
        "--label-smoothing", type=non_negative_float, default=None, help="label smoothing"
    )
    p.add_argument(
        "--warmup-epochs", type=non_negative_float, default=None, help="linear warmup epochs"
    )
    p.add_argument(
        "--schedule",
        choices=("cosine", "polynomial", "step", "constant"),
        default=None,
        help="decay after the warmup",
    )
    p.add_argument("--power", type=non_negative_float, default=None, help="polynomial power")
    p.add_argument(
        "--boundaries", type=float_list, default=None, help="step-decay epochs, e.g. 30,60,80"
    )
    p.add_argument(
        "--log-dir", default=None, help="checkpoints, logs, TensorBoard and export go here"
    )
    p.add_argument(
        "--checkpoint-every",
        type=non_negative_int,
        default=0,
        help="also checkpoint every N steps (0: only at epoch ends)",
    )
    p.add_argument("--keep-checkpoints", type=positive_int, default=3, help="checkpoints kept (3)")
    p.add_argument(
        "--resume", action="store_true", help="continue from the newest checkpoint in --log-dir"
    )
    p.add_argument(
        "--log-every", type=non_negative_int, default=100, help="print a line every N steps"
    )
    p.add_argument(
        "--burn-in", type=non_negative_int, default=20, help="steps left out of Images/sec"
    )
    p.add_argument(
        "--deterministic", action="store_true", help="deterministic ops (bit-exact resumes)"
    )
    p.add_argument(
        "--compression",
        choices=("none", "fp16"),
        default="none",
        help="Horovod gradient compression (fp16 needs --precision fp16)",
    )
    p.add_argument(
        "--eval",
        choices=("end", "epoch", "none"),
        default="end",
        help="evaluate top-1/top-5 at the end (default), after every epoch, or never",
    )
    p.add_argument("--no-export", action="store_true", help="do not export the model at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=train_command)

    p = subparsers.add_parser(
        "eval",
        help="evaluate a checkpoint over the whole validation set (top-1, top-5)",
        description=(
            "Evaluate --checkpoint (a checkpoint .npz, a run directory whose newest valid "
            "checkpoint is used, or an exported .keras model) on every validation image."
        ),
    )
    _add_model_and_data(p, synthetic_help="random data (smoke tests)")
    p.add_argument("--checkpoint", required=True, help="checkpoint file, run directory or .keras")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.set_defaults(func=eval_command)

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
    _add_model_and_data(p, synthetic_help="one random batch on the device: times the model")
    p.add_argument("--steps", type=positive_int, default=100, help="measured steps (100)")
    p.add_argument(
        "--burn-in", type=non_negative_int, default=20, help="unmeasured steps, at least 1 (20)"
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
        "--latency-calls", type=positive_int, default=20, help="timed calls per size (20)"
    )
    p.add_argument("--json", default=None, help="also write the result to this JSON file")
    p.set_defaults(func=benchmark_command)


def _task(args: argparse.Namespace, *, synthetic_steps: int = 100, label_smoothing=None):
    from cvbench.training.tasks import TaskOptions, task_for_model

    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise CLIError(f"--data-dir {args.data_dir!r} is not a directory")
    task_cls = task_for_model(args.model)
    options = TaskOptions(
        model=args.model,
        data_dir=args.data_dir,
        image_size=args.image_size,
        num_classes=args.num_classes,
        label_smoothing=label_smoothing,
        synthetic_steps=synthetic_steps,
    )
    return task_cls(options)


def _overrides(args: argparse.Namespace, names: dict[str, str]) -> dict:
    chosen = {field: getattr(args, flag) for flag, field in names.items()}
    return {field: value for field, value in chosen.items() if value is not None}


def train_command(args: argparse.Namespace) -> int:
    """Runs `cvbench train`."""
    from cvbench.training import TrainConfig, Trainer

    task = _task(
        args,
        synthetic_steps=args.steps_per_epoch or 100,
        label_smoothing=args.label_smoothing,
    )
    optimizer, schedule = task.recipe()
    optimizer = optimizer.replace(
        **_overrides(
            args,
            {
                "optimizer": "name",
                "momentum": "momentum",
                "nesterov": "nesterov",
                "weight_decay": "weight_decay",
            },
        )
    )
    schedule = schedule.replace(
        **_overrides(
            args,
            {
                "lr": "base_lr",
                "warmup_epochs": "warmup_epochs",
                "schedule": "decay",
                "power": "power",
                "boundaries": "boundaries_epochs",
            },
        )
    )
    config = TrainConfig(
        log_dir=args.log_dir,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
        resume=args.resume,
        log_every=args.log_every,
        burn_in_steps=args.burn_in,
        progress_bar=False if args.no_progress else "auto",
        seed=args.seed,
        deterministic=args.deterministic,
        compression=args.compression,
        export=not args.no_export,
    )
    trainer = Trainer(
        task.build_model,
        task.loss(),
        optimizer,
        schedule=schedule,
        precision=args.precision,
        metrics=task.metrics(),
        config=config,
    )
    data = task.train_data(
        batch_size=args.batch_size,
        num_shards=trainer.size,
        shard_index=trainer.rank,
        seed=args.seed,
    )
    shards = _shards(args, trainer)
    callbacks = []
    if args.eval == "epoch":  # every rank evaluates its shard; rank 0 prints
        import keras

        callbacks.append(
            keras.callbacks.LambdaCallback(
                on_epoch_end=lambda epoch, logs: _report(
                    trainer, task.evaluate(trainer, **shards), json_path=None
                )
            )
        )
    trainer.fit(
        data.data,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch or data.steps_per_epoch,
        batch_size=args.batch_size,
        callbacks=callbacks,
    )
    if args.eval == "end":
        _report(trainer, task.evaluate(trainer, **shards), json_path=None)
    return 0


def eval_command(args: argparse.Namespace) -> int:
    """Runs `cvbench eval`."""
    from cvbench.training import TrainConfig, Trainer
    from cvbench.training.checkpoint import find_checkpoint

    task = _task(args)
    checkpoint = Path(args.checkpoint)
    if not checkpoint.exists():
        raise CLIError(f"--checkpoint {args.checkpoint!r} does not exist")
    config = TrainConfig(progress_bar=False, log_every=0, seed=args.seed)
    if checkpoint.suffix == ".keras":
        import keras

        model = keras.saving.load_model(checkpoint, compile=False)
        trainer = Trainer(
            model, task.loss(), precision=_policy_of(model), metrics=task.metrics(), config=config
        )
    else:
        trainer = Trainer(
            task.build_model,
            task.loss(),
            precision=args.precision,
            metrics=task.metrics(),
            config=config,
        )
        trainer.load_weights(find_checkpoint(checkpoint))
    shards = _shards(args, trainer)
    _report(trainer, task.evaluate(trainer, **shards), json_path=args.json)
    return 0


def benchmark_command(args: argparse.Namespace) -> int:
    """Runs `cvbench benchmark` through `cvbench.benchmark.benchmark_cvbench`, the code path
    of `benchmarks/train_throughput.py`."""
    from cvbench.benchmark.results import jsonable
    from cvbench.benchmark.run import benchmark_cvbench, benchmark_latency, endless_batches
    from cvbench.training.distributed import get_distribution

    dist = get_distribution("auto")
    seed = 0 if args.seed is None else args.seed
    batches = None
    if args.data_dir is not None:
        task = _task(args, synthetic_steps=args.burn_in + args.steps)
        data = task.train_data(
            batch_size=args.batch_size, num_shards=dist.size, shard_index=dist.rank, seed=seed
        )
        batches = endless_batches(data.data)
    say = print if dist.is_chief else (lambda line: None)
    if args.log_every:
        say(f"{'step':>6} {'img/s':>10}")
    result = benchmark_cvbench(
        args.model,
        mode=args.mode,
        batch_size=args.batch_size,
        image_size=args.image_size,
        num_classes=args.num_classes,
        precision=args.precision,
        warmup_steps=max(1, args.burn_in),
        steps=args.steps,
        window_steps=args.log_every or DEFAULT_WINDOW_STEPS,
        batches=batches,
        distribution=dist,
        seed=seed,
        report=(lambda line: say(line)) if args.log_every else None,
    )
    measured = result.throughput
    say("-" * 64)
    say(measured.format())
    say("-" * 64)
    latency = None
    if args.mode == "inference" and args.latency_batch_sizes:
        latency = benchmark_latency(
            args.model,
            batch_sizes=args.latency_batch_sizes,
            image_size=args.image_size,
            num_classes=args.num_classes,
            precision=args.precision,
            calls=args.latency_calls,
            seed=seed,
        )
        from cvbench.benchmark.table import latency_table

        say(latency_table([latency]))
    if dist.is_chief and args.json:
        from cvbench.utils.io import write_json_atomic

        summary = {
            **result.to_dict(),
            # NVIDIA's summary fields, as `Images/sec: mean +/- stderr (jitter = ...)`.
            "mean": measured.images_per_sec,
            "stderr": measured.stderr,
            "jitter": measured.jitter,
            "steps": len(measured.window_rates) * measured.window_steps,
            "global_batch": measured.images_per_step,
            "ranks": dist.size,
            "latency": None if latency is None else latency.to_dict(),
        }
        write_json_atomic(args.json, jsonable(summary))
    return 0


def _shards(args: argparse.Namespace, trainer) -> dict:
    return {"batch_size": args.batch_size, "num_shards": trainer.size, "shard_index": trainer.rank}


def _policy_of(model) -> str:
    name = model.dtype_policy.name
    return name if name in ("mixed_float16", "mixed_bfloat16") else "float32"


def _report(trainer, results: dict[str, float], *, json_path: str | None) -> None:
    if not trainer.is_chief:
        return
    for name, value in results.items():
        print(f"{name}: {value:.6g}", flush=True)
    if json_path:
        from cvbench.utils.io import write_json_atomic

        write_json_atomic(json_path, results)
