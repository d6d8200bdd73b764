"""CPU inference of the serving export against keras.applications, and SSD post-processing
on the host (numpy) against in the graph (not collected).

    KERAS_BACKEND=tensorflow python benchmarks/export_inference.py \\
        [--batch-size 16] [--image-size 224] [--rounds 5] [--steps 2] [--post-batch 8]

Classifier: cvbench's ResNet-50 (random weights) exported by `export_for_serving` (SavedModel,
uint8 input, batch norms folded; also without folding) and `keras.applications.ResNet50
(weights=None)` with `predict`, the same batch of the same size. Rounds of `--steps` calls
alternate between the three, and the median img/s of each is printed with the ratios to
keras.applications (rounds of few steps keep them comparable on a machine shared with other
work). Post-processing: the outputs of SSD320 (random weights, 12804 anchors x 90 classes)
on a batch of random images, decoded and NMS-ed by the numpy `postprocess` and by the
`tf.function` of the export's graph (`cvbench.inference.serving.detections`), alternating.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np


def rates(fn: Callable[[], object], images: int, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        out.append(images / (time.perf_counter() - start))
    return out


def alternate(fns: dict[str, Callable[[], object]], images: int, rounds: int, steps: int):
    for fn in fns.values():
        fn()  # build, trace, warm up
    seen: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            seen[name] += rates(fn, images, steps)
    return {name: statistics.median(r) for name, r in seen.items()}, seen


def classifier_table(args: argparse.Namespace, workdir: Path) -> None:
    import tensorflow as tf

    from cvbench.inference import ModelInfo
    from cvbench.inference.export import export_for_serving
    from cvbench.models import resnet50

    size = args.image_size
    info = ModelInfo(
        task="classification", class_names=tuple(map(str, range(1000))), image_size=(size, size)
    )
    model = resnet50(input_shape=(size, size, 3), classifier_activation=None)
    served = {}
    for fold in (True, False):
        path = export_for_serving(model, workdir / f"resnet50_fold{fold}", info=info, fold=fold)
        served[fold] = tf.saved_model.load(str(path)).signatures["serving_default"]
    apps = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3))
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (args.batch_size, size, size, 3), dtype=np.uint8)
    uint8 = tf.constant(batch)
    floats = batch.astype("float32")
    fns = {
        "export, folded BN": lambda: served[True](images=uint8)["top_k_indices"].numpy(),
        "export, unfolded": lambda: served[False](images=uint8)["top_k_indices"].numpy(),
        "keras.applications predict": lambda: apps.predict(
            floats, batch_size=args.batch_size, verbose=0
        ),
    }
    medians, seen = alternate(fns, args.batch_size, args.rounds, args.steps)
    base = medians["keras.applications predict"]
    print(
        f"\nResNet-50, {size} x {size}, batch {args.batch_size}, CPU, "
        f"{args.rounds} rounds x {args.steps} calls (median img/s)"
    )
    print("| path | img/s | min-max | vs keras.applications |")
    print("|---|---|---|---|")
    for name, value in medians.items():
        low, high = min(seen[name]), max(seen[name])
        print(f"| {name} | {value:.1f} | {low:.1f}-{high:.1f} | {value / base:.2f}x |")


def postprocess_table(args: argparse.Namespace) -> None:
    import tensorflow as tf

    from cvbench.detection.postprocess import postprocess
    from cvbench.detection.predict import Decoder, detection_settings
    from cvbench.detection.ssd import ssd320
    from cvbench.inference.serving import detections

    model = ssd320()
    rng = np.random.default_rng(1)
    images = rng.uniform(0, 255, (args.post_batch, 320, 320, 3)).astype("float32")
    outputs = model.predict(images, batch_size=args.post_batch, verbose=0)
    codes, logits = outputs["boxes"], outputs["classes"]
    settings = detection_settings()  # SSD320 v1.2's: what its model files record
    anchors, post = Decoder(settings, (320, 320)).anchors, settings["postprocess"]
    graph = tf.function(lambda c, lg: detections(c, lg, anchors, **post))
    tf_codes, tf_logits = tf.constant(codes), tf.constant(logits)
    fns = {
        "numpy postprocess (host)": lambda: postprocess(codes, logits, anchors, **post),
        "in-graph (export's tf.function)": lambda: graph(tf_codes, tf_logits)[
            "num_detections"
        ].numpy(),
    }
    medians, seen = alternate(fns, args.post_batch, args.rounds, args.steps)
    print(
        f"\nSSD320 post-processing (12804 anchors x 90 classes, score > 1e-8, random-weight "
        f"outputs), batch {args.post_batch}, {args.rounds} rounds x {args.steps} calls"
    )
    print("| path | images/s | min-max |")
    print("|---|---|---|")
    for name, value in medians.items():
        print(f"| {name} | {value:.1f} | {min(seen[name]):.1f}-{max(seen[name]):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--post-batch", type=int, default=8)
    parser.add_argument("--skip-classifier", action="store_true")
    parser.add_argument("--skip-postprocess", action="store_true")
    args = parser.parse_args()
    if keras.config.backend() != "tensorflow":
        raise SystemExit("export_inference.py needs KERAS_BACKEND=tensorflow")
    keras.utils.set_random_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_classifier:
            classifier_table(args, Path(tmp))
        if not args.skip_postprocess:
            postprocess_table(args)


if __name__ == "__main__":
    main()
