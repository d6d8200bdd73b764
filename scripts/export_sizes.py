#!/usr/bin/env python
"""Sizes on disk of a model file and its serving exports against the bytes of its weights.

    python scripts/export_sizes.py [--model resnet18] [--image-size 224] [--classes 1000]

Builds the model (random weights), saves it as a plain-Keras `.keras` file with its
`ModelInfo`, exports it with `export_for_serving` as a SavedModel and a TFLite file (batch
norms folded) and prints the four sizes in MB (10**6 bytes). Each weight is stored once: the
exports come out at about the weights' float32 bytes (folding drops the batch norms' vectors),
not twice as Keras' `ExportArchive.track` would make them.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def _bytes(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    args = parser.parse_args()

    from cvbench.inference import ModelInfo, save_model
    from cvbench.inference.export import export_for_serving
    from cvbench.utils.plain_keras import to_plain_keras
    from cvbench.zoo import get_model

    size = args.image_size
    model = get_model(args.model, input_shape=(size, size, 3), num_classes=args.classes)
    names = tuple(str(i) for i in range(args.classes))
    info = ModelInfo(task="classification", class_names=names, image_size=(size, size))
    out = Path(tempfile.mkdtemp(prefix="export_sizes."))
    path = save_model(to_plain_keras(model), out / "model.keras", info)
    saved = export_for_serving(path, out / "saved_model")
    tflite = export_for_serving(path, out / "model.tflite", format="tflite")
    weights = sum(int(np.prod(w.shape)) * 4 for w in model.weights)
    mb = {
        "weights (float32)": weights,
        ".keras": _bytes(path),
        "SavedModel": _bytes(saved),
        "SavedModel variables": _bytes(saved / "variables"),
        "TFLite": _bytes(tflite),
    }
    print(f"{args.model}, {size} x {size}, {args.classes} classes:")
    for name, n in mb.items():
        print(f"  {name:<22} {n / 1e6:7.1f} MB")


if __name__ == "__main__":
    main()
