#!/usr/bin/env python
"""Do cvbench's serving exports convert to ONNX, and does onnxruntime agree with them?

    pip install tf2onnx onnxruntime      # not cvbench dependencies
    python scripts/check_onnx.py

Exports a random 32 px ResNet-18 classifier under each resize rule ("stretch",
"center_crop", "crop_then_resize") and a random 64 px ResNet-18 SSD ("stretch", score
threshold 0.02) as SavedModels, converts each with `python -m tf2onnx.convert --saved-model`,
runs both on uint8 images that are not the model's size (45 x 37 and 80 x 100) and prints,
per output, whether the integer and string outputs are equal and the largest difference of the
float ones. Exits 1 when a conversion fails or an integer / string output differs.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np


def _signature_outputs(saved: Path, images: np.ndarray) -> dict[str, np.ndarray]:
    import tensorflow as tf

    serve = tf.saved_model.load(str(saved)).signatures["serving_default"]
    return {k: v.numpy() for k, v in serve(images=tf.constant(images)).items()}


def _onnx_outputs(saved: Path, images: np.ndarray) -> dict[str, np.ndarray] | None:
    import onnxruntime

    out = saved.with_suffix(".onnx")
    command = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved)]
    done = subprocess.run([*command, "--output", str(out)], capture_output=True, text=True)
    if done.returncode:
        print(f"  tf2onnx failed:\n{done.stderr[-2000:]}")
        return None
    session = onnxruntime.InferenceSession(str(out))
    (feed,) = session.get_inputs()
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {feed.name: images}), strict=True))


def compare(name: str, saved: Path, images: np.ndarray) -> bool:
    """Prints the comparison of one export; True when the exact outputs are equal."""
    expected = _signature_outputs(saved, images)
    got = _onnx_outputs(saved, images)
    print(name, "converted" if got is not None else "NOT converted")
    if got is None:
        return False
    ok = True
    for key, want in sorted(expected.items()):
        value = np.asarray(got[key])
        if want.dtype.kind in "OSi":
            if value.dtype.kind in "OU":  # onnxruntime returns str, TensorFlow bytes
                value = np.vectorize(lambda s: s.encode(), otypes=[object])(value)
            equal = np.array_equal(value.astype(want.dtype), want)
            ok &= equal
            print(f"  {key}: {'equal' if equal else 'DIFFERENT'}")
        else:
            print(f"  {key}: max |difference| {np.abs(value - want).max():.1e}")
    return ok


def main() -> int:
    import onnxruntime
    import tensorflow as tf
    import tf2onnx

    from cvbench.detection.ssd import build_ssd
    from cvbench.inference import ModelInfo
    from cvbench.inference.export import export_for_serving
    from cvbench.models import resnet18

    print(f"tensorflow {tf.__version__}, tf2onnx {tf2onnx.__version__}, "
          f"onnxruntime {onnxruntime.__version__}")  # fmt: skip
    out = Path(tempfile.mkdtemp(prefix="check_onnx."))
    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(0)
    ok = True
    classifier = resnet18(input_shape=(32, 32, 3), num_classes=5, classifier_activation=None)
    images = rng.integers(0, 256, (3, 45, 37, 3), dtype=np.uint8)
    for rule in ("stretch", "center_crop", "crop_then_resize"):
        info = ModelInfo(
            task="classification", class_names=tuple("abcde"), image_size=(32, 32), resize=rule
        )
        saved = export_for_serving(classifier, out / f"classifier_{rule}", info=info, top_k=3)
        ok &= compare(f"classifier, {rule}", saved, images)
    ssd = build_ssd(num_classes=3, backbone="resnet18", image_size=64, depth=16, head_layers=2)
    head = ssd.get_layer("head")
    for predictor, std in ((head.box_predictor, 0.3), (head.class_predictor, 0.5)):
        kernel, bias = predictor.get_weights()  # spread outputs: overlapping boxes, scores
        predictor.set_weights([rng.normal(0, std, kernel.shape).astype("float32"), bias])
    post = {"iou_threshold": 0.6, "score_threshold": 1e-8, "max_per_class": 100, "max_total": 100}
    detection = {"anchors": {}, "scales": [10.0, 10.0, 5.0, 5.0], "postprocess": post}
    info = ModelInfo(
        task="detection", class_names=("a", "b", "c"), image_size=(64, 64), resize="stretch",
        detection=detection,
    )  # fmt: skip
    saved = export_for_serving(ssd, out / "ssd", info=info, score_threshold=0.02)
    ok &= compare("ssd, stretch", saved, rng.integers(0, 256, (2, 80, 100, 3), dtype=np.uint8))
    print(f"exports and .onnx files in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
