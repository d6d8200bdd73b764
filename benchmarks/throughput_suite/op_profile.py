"""Operation-level CPU profile of cvbench's ResNet-50 step beside keras.applications' (#42).

    python benchmarks/throughput_suite/op_profile.py --precision bf16 --build v1
    python benchmarks/throughput_suite/op_profile.py --mode inference --precision fp32

TensorFlow's profiler traces `--steps` steps (or forward passes) of each workload, `--reps`
times alternating, and the trace's host operations are summed by type (`op_times`); each
type's figure is its minimum over the repeats, in ms per step. TensorFlow runs with one
inter-op and one intra-op thread, so that an operation's duration is its CPU time and two
workloads' figures add up alike (with two threads the operations of one step overlap). The
workloads are the suite's: cvbench's `Trainer` step (`--build v1`: the model built as v1, the
suite's `resnet_v1` variant; `--plain-conv` also measures it with Keras' own convolution
gradients, `--plain-batchnorm` with Keras' own batch norm), keras.applications' `fit`; in
inference cvbench's forward pass as built, the model as `cvbench export` serves it (batch
norms folded) and keras.applications' `predict`.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import os
import sys
import tempfile
from typing import Any


def op_times(logdir: str) -> tuple[collections.Counter, collections.Counter]:
    """(ms, count) by operation type of the host operations in the profile under `logdir`
    (TensorFlow's `name:type` events of the `/host:CPU` plane; function calls excluded).

    Raises:
        FileNotFoundError: when `logdir` holds no `.xplane.pb`.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    files = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
    if not files:
        raise FileNotFoundError(f"no .xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    with open(files[-1], "rb") as f:
        space.ParseFromString(f.read())
    ms, count = collections.Counter(), collections.Counter()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name or name.startswith("__inference"):
                    continue
                kind = name.rsplit(":", 1)[1]
                if kind.startswith((" ", "__inference")):  # a function call, not an op
                    continue
                ms[kind] += event.duration_ps / 1e9
                count[kind] += 1
    return ms, count


def profile(workloads: dict[str, Any], steps: int, reps: int) -> dict[str, tuple]:
    """Per workload, (min ms per step by type, count per step by type) over `reps` traces."""
    import tensorflow as tf

    best: dict[str, tuple] = {n: ({}, {}) for n in workloads}
    for _ in range(reps):
        for name, work in workloads.items():
            with tempfile.TemporaryDirectory() as logdir:
                tf.profiler.experimental.start(logdir)
                work.run(steps)
                tf.profiler.experimental.stop()
                ms, count = op_times(logdir)
            for kind, value in ms.items():
                best[name][0][kind] = min(best[name][0].get(kind, float("inf")), value / steps)
                best[name][1][kind] = count[kind] // steps
    return best


def _workloads(args: argparse.Namespace) -> dict[str, Any]:
    from cvbench.benchmark.run import cvbench_inference, cvbench_training, inference_model
    from cvbench.benchmark.workloads import cvbench_model, synthetic_batch
    from cvbench.inference.fold_batchnorm import fold_batchnorm
    from cvbench.models.batchnorm import set_fused_batchnorm
    from cvbench.models.layers import set_fast_gradients
    from cvbench.training.precision import resolve_precision
    from cvbench.utils.plain_keras import to_plain_keras
    from throughput_suite import reference
    from throughput_suite.suite import as_resnet_v1

    policy = resolve_precision(args.precision, has_gpu=False)
    model = cvbench_model("resnet50", image_size=args.image_size)
    if args.build == "v1":
        model = dataclasses.replace(model, build=lambda b=model.build: as_resnet_v1(b()))
    keras_net = reference.keras_application(
        "resnet50", image_size=args.image_size, num_classes=model.num_classes, precision=policy
    )
    batch = synthetic_batch(model, args.batch_size, seed=0)
    if args.mode == "inference":
        net = inference_model(model, policy)
        kw = dict(batch_size=args.batch_size, jit_compile=False)
        return {
            "cvbench": cvbench_inference(model, net, **kw),
            "cvbench exported": cvbench_inference(model, fold_batchnorm(to_plain_keras(net)), **kw),
            reference.KERAS: reference.PredictReference(keras_net, batch[0]),
        }
    variants = {"cvbench": model}
    if args.plain_conv:
        plain = dataclasses.replace(
            model, build=lambda b=model.build: set_fast_gradients(b(), False)
        )
        variants["cvbench+plain_conv"] = plain
    if args.plain_batchnorm:
        plain = dataclasses.replace(
            model, build=lambda b=model.build: set_fused_batchnorm(b(), False)
        )
        variants["cvbench+plain_batchnorm"] = plain
    out = {}
    for name, variant in variants.items():
        out[name], _ = cvbench_training(
            variant, batch_size=args.batch_size, precision=policy, planned_steps=100,
            jit_compile=False, distribution="single",
        )  # fmt: skip
    reference.compile_plain(keras_net, model.optimizer, learning_rate=0.01)
    out[reference.KERAS] = reference.FitReference(keras_net, batch, args.batch_size)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("train", "inference"), default="train")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--build", choices=("v1.5", "v1"), default="v1.5")
    parser.add_argument("--plain-conv", action="store_true")
    parser.add_argument("--plain-batchnorm", action="store_true")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    import tensorflow as tf

    from cvbench.utils.cpu import describe_cpu

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    print(f"cpu: {describe_cpu()}")
    workloads = _workloads(args)
    for work in workloads.values():
        work.first_step()
        work.run(2)
    best = profile(workloads, args.steps, args.reps)
    names = list(best)
    total = collections.Counter()
    for ms, _ in best.values():
        total.update({k: v for k, v in ms.items() if _is_operation(k)})
    print(f"{'operation':36s}" + "".join(f"{n[:22]:>24s}" for n in names))
    sums = [sum(v for k, v in best[n][0].items() if _is_operation(k)) for n in names]
    print(f"{'all (ms per step)':36s}" + "".join(f"{v:24.1f}" for v in sums))
    for kind, _ in total.most_common(args.top):
        cells = [f"{best[n][0].get(kind, 0.0):17.1f} ({best[n][1].get(kind, 0):4d})" for n in names]
        print(f"{kind[:36]:36s}" + "".join(cells))


def _is_operation(kind: str) -> bool:
    """An operation's own event, not the executor's ("Run", "Process")."""
    return kind not in ("Run", "Process")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
