"""Training and inference throughput of cvbench beside keras.applications and torchvision.

For each precision and model (ResNet-50, Inception V3, SSD320 by default): training images/s
of cvbench (the code path of `cvbench benchmark`) on a synthetic batch resident on the
device, and in the same run keras.applications' ResNet50 / InceptionV3 trained with plain
`model.fit` (same backend, precision and batch) and, with --torch-reference, torchvision's
(PyTorch AMP, channels_last). The implementations' timing windows alternate, so ratios hold
on a loaded machine. Then inference images/s the same way, and cvbench's inference latency
percentiles (p50/p90/p95/p99) per batch size, SSD320's including post-processing.

Prints a Markdown table; --json writes everything (settings, environment, every window).

    python benchmarks/train_throughput.py --precisions fp32,bf16 --image-size 128 \\
        --batch-size 16 --json throughput.json
    KERAS_BACKEND=jax python benchmarks/train_throughput.py --precisions fp16 \\
        --torch-reference --json h200.json
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cvbench.cli.args import name_list, positive_int, positive_int_list

# The suite is the package `throughput_suite` beside this script, outside cvbench.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# JAX preallocates 75% of GPU memory by default; leave room for PyTorch's process on the GPU.
_JAX_MEMORY_WITH_TORCH = "0.55"


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--models",
        type=name_list,
        default=("resnet50", "inception_v3", "ssd320"),
        help="comma-separated cvbench model names (resnet50,inception_v3,ssd320)",
    )
    p.add_argument(
        "--precisions",
        type=name_list,
        default=("auto",),
        help="comma-separated fp32, bf16, fp16 or auto (fp16 on a GPU, bf16 on a CPU with native "
        "bfloat16, else fp32); default auto",
    )
    p.add_argument("--batch-size", type=positive_int, default=256, help="classifier batch (256)")
    p.add_argument("--ssd-batch-size", type=positive_int, default=32, help="SSD320 batch (32)")
    p.add_argument(
        "--image-size",
        type=positive_int,
        default=None,
        help="input size of every model (default: each model's own, 224 / 299 / 320)",
    )
    p.add_argument("--warmup", type=positive_int, default=5, help="unmeasured steps (5)")
    p.add_argument("--windows", type=positive_int, default=3, help="timed windows (3)")
    p.add_argument("--window-steps", type=positive_int, default=10, help="steps per window (10)")
    p.add_argument("--no-train", action="store_true", help="skip training")
    p.add_argument("--no-inference", action="store_true", help="skip inference and latency")
    p.add_argument("--no-keras-reference", action="store_true", help="skip keras.applications")
    p.add_argument(
        "--torch-reference", action="store_true", help="also run torchvision (needs PyTorch)"
    )
    p.add_argument(
        "--torch-compile",
        action="store_true",
        help="with --torch-reference, also torchvision through torch.compile (its own column)",
    )
    p.add_argument(
        "--latency-batch-sizes",
        type=positive_int_list,
        default=(1, 8, 64, 256),
        help="inference latency batch sizes (1,8,64,256; 'none' to skip)",
    )
    p.add_argument("--latency-calls", type=positive_int, default=20, help="timed calls (20)")
    p.add_argument(
        "--jit",
        choices=("auto", "on", "off"),
        default="auto",
        help="XLA-compile cvbench's steps (auto: on JAX and on TensorFlow with a GPU; XLA is "
        "slower than TensorFlow's own kernels on CPU)",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds after which no new measurement starts (the rest is listed as skipped); "
        "training runs first",
    )
    p.add_argument(
        "--variants",
        type=name_list,
        default=(),
        help="variants of cvbench to measure beside it, as cvbench+<name> columns: plain_conv "
        "(Keras' own convolution gradients, training only), plain_batchnorm (Keras' own "
        "batch norm instead of TensorFlow's fused kernel), folded_bn (the served model: batch "
        "norms folded into the convolutions, inference only)",
    )
    p.add_argument("--seed", type=int, default=0, help="initialization and data seed")
    p.add_argument("--json", default=None, help="write every result and setting here")
    p.add_argument("--markdown", default=None, help="also write the tables here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the suite; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.torch_compile and not args.torch_reference:
        build_parser().error("--torch-compile needs --torch-reference")
    if args.torch_reference:
        os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", _JAX_MEMORY_WITH_TORCH)
    from cvbench.benchmark import latency_table
    from cvbench.benchmark.results import jsonable
    from cvbench.utils.io import atomic_open, write_json_atomic
    from throughput_suite import SuiteConfig, describe_environment, run_suite, throughput_table

    config = SuiteConfig(
        models=args.models,
        precisions=args.precisions,
        batch_size=args.batch_size,
        detection_batch_size=args.ssd_batch_size,
        image_size=args.image_size,
        warmup_steps=args.warmup,
        windows=args.windows,
        window_steps=args.window_steps,
        train=not args.no_train,
        inference=not args.no_inference,
        keras_reference=not args.no_keras_reference,
        torch_reference=args.torch_reference,
        torch_compile=args.torch_compile,
        latency_batch_sizes=args.latency_batch_sizes,
        latency_calls=args.latency_calls,
        jit_compile={"auto": "auto", "on": True, "off": False}[args.jit],
        seed=args.seed,
        time_budget_s=args.time_budget,
        variants=args.variants,
    )
    command = ["python", "benchmarks/train_throughput.py"]
    command += list(argv) if argv is not None else sys.argv[1:]
    environment = describe_environment(command)
    print(f"cpu: {environment['cpu_line']}", flush=True)

    def tables(results) -> str:
        parts = [throughput_table(results.throughput)]
        if results.latency:
            parts.append(latency_table(results.latency))
        if results.skipped:
            parts.append("Skipped: " + "; ".join(results.skipped))
        return "\n\n".join(parts)

    def write(results) -> None:
        # After every measurement, so that an interrupted run keeps what it measured.
        if args.markdown:
            with atomic_open(args.markdown, "w", encoding="utf-8") as f:
                f.write(tables(results) + "\n")
        if args.json:
            environment["load_average_now"] = describe_environment(command)["load_average"]
            payload = {"environment": environment, "config": config.to_dict()}
            write_json_atomic(args.json, jsonable(payload | results.to_dict()))

    results = run_suite(config, report=lambda line: print(line, flush=True), on_result=write)
    write(results)
    print(tables(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
