"""Every `.keras` cvbench writes for users loads with plain Keras in a process that never
imports cvbench (safe mode, TensorFlow and JAX) and computes what the trained model computes:
`cvbench train` (classifier and SSD) and the demo's two files; `cvbench eval` of such a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

import cvbench.cli as cli
from cvbench.data.read.channel_means import IMAGENET_MEAN_RGB, IMAGENET_STD_RGB
from cvbench.utils.model_file import read_model_info

# Loads each (model, inputs, outputs) triple with plain Keras, never importing cvbench.
PLAIN_LOADER = """
import sys
import keras, numpy as np

def imported_cvbench():
    return sorted(m for m in sys.modules if m == "cvbench" or m.startswith("cvbench."))

args = sys.argv[1:]
for model_path, in_path, out_path in zip(args[0::3], args[1::3], args[2::3]):
    model = keras.saving.load_model(model_path, safe_mode=True, compile=False)
    y = keras.tree.map_structure(keras.ops.convert_to_numpy, model(np.load(in_path)))
    np.savez(out_path, **(y if isinstance(y, dict) else {"output": y}))
assert not imported_cvbench(), imported_cvbench()
print("backend", keras.backend.backend(), "cvbench modules", imported_cvbench())
"""
BACKENDS = ("tensorflow", "jax")


def _load_plainly(cases: list[tuple[Path, np.ndarray]], tmp_path: Path, backend: str) -> list:
    """Outputs of each `(model file, inputs)` computed by a fresh `python -I` (no cvbench on
    its path: neither the working directory nor PYTHONPATH) on `backend`."""
    argv = []
    for i, (path, x) in enumerate(cases):
        np.save(tmp_path / f"in_{i}.npy", x.astype("float32"))
        argv += [str(path), str(tmp_path / f"in_{i}.npy"), str(tmp_path / f"out_{i}_{backend}.npz")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-I", "-c", PLAIN_LOADER, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"backend {backend} cvbench modules []" in done.stdout
    return [dict(np.load(tmp_path / f"out_{i}_{backend}.npz")) for i in range(len(cases))]


def _numpy(y) -> dict[str, np.ndarray]:
    y = keras.tree.map_structure(keras.ops.convert_to_numpy, y)
    return y if isinstance(y, dict) else {"output": y}


def _assert_close(got: dict, expected: dict, atol: float) -> None:
    assert sorted(got) == sorted(expected)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], atol=atol, rtol=1e-4, err_msg=key)


def _train(tmp_path: Path, name: str, argv: list[str]) -> Path:
    log_dir = tmp_path / name
    code = cli.main(["train", *argv, "--epochs", "1", "--steps-per-epoch", "2", "--eval",
                     "none", "--no-progress", "--log-every", "0", "--log-dir", str(log_dir),
                     "--seed", "0"])  # fmt: skip
    assert code == 0
    return log_dir


def _trained(argv: list[str], log_dir: Path) -> keras.Model:
    """The model of the run's last checkpoint, in float32, as training computes it."""
    from cvbench.cli.task_args import add_model_and_data, task_from_args
    from cvbench.tasks import build_trainer
    from cvbench.training import TrainConfig
    from cvbench.training.checkpoint import find_checkpoint

    parser = argparse.ArgumentParser()
    add_model_and_data(parser, synthetic_help="")
    args = parser.parse_args([*argv, "--precision", "fp32"])
    config = TrainConfig(progress_bar=False, log_every=0)
    trainer = build_trainer(task_from_args(args), precision="fp32", config=config)
    trainer.load_weights(find_checkpoint(log_dir))
    return trainer.model


CLASSIFIER = ["--model", "resnet18", "--synthetic", "--batch-size", "2", "--image-size", "32",
              "--num-classes", "4"]  # fmt: skip
DETECTOR = ["--model", "ssd320", "--synthetic", "--batch-size", "2", "--image-size", "64",
            "--num-classes", "3"]  # fmt: skip


@pytest.mark.slow
def test_cli_trained_models_load_with_plain_keras_and_agree(tmp_path, legacy_h5):
    # bf16 training: the file must still be float32 and equal the float32 model
    cls_dir = _train(tmp_path, "cls", [*CLASSIFIER, "--precision", "bf16"])
    # SSD320 freezes its batch norms: it trains from a backbone file (a local, random one).
    notop = keras.applications.ResNet50(weights=None, include_top=False)
    backbone = str(legacy_h5(notop, tmp_path / "notop.h5", 5))
    det_dir = _train(
        tmp_path, "det", [*DETECTOR, "--backbone-weights", backbone, "--precision", "fp32"]
    )
    cls_file, det_file = cls_dir / "export" / "model.keras", det_dir / "export" / "model.keras"
    assert (cls_dir / "export" / "keras_saved_model" / "saved_model.pb").is_file()

    cls_info, det_info = read_model_info(cls_file), read_model_info(det_file)
    assert (cls_info.task, cls_info.class_names, cls_info.image_size) == (
        "classification", ("0", "1", "2", "3"), (32, 32))  # fmt: skip
    assert cls_info.resize == "center_crop" and cls_info.model == "resnet18"
    assert det_info.task == "detection" and det_info.resize == "stretch"
    assert det_info.class_names == ("0", "1", "2")  # not COCO's 80/90: plain indices
    assert det_info.detection["scales"] == [10.0, 10.0, 5.0, 5.0]
    assert det_info.detection["anchors"] == {
        "min_level": 3, "max_level": 7, "anchor_scale": 4.0, "aspect_ratios": [1.0, 2.0, 0.5],
        "scales_per_octave": 2}  # fmt: skip
    assert det_info.detection["postprocess"]["iou_threshold"] == 0.6

    rng = np.random.default_rng(0)
    pixels = rng.uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    det_pixels = rng.uniform(0, 255, (2, 64, 64, 3)).astype("float32")
    normalized = (pixels - np.array(IMAGENET_MEAN_RGB)) / np.array(IMAGENET_STD_RGB)
    # the classifier file takes [0, 255]: the trained model gets what the pipeline gives it
    cls_expected = _numpy(_trained(CLASSIFIER, cls_dir)(normalized.astype("float32")))
    det_expected = _numpy(_trained(DETECTOR, det_dir)(det_pixels))
    assert cls_expected["output"].shape == (2, 4)
    assert det_expected["classes"].shape == (2, det_expected["boxes"].shape[1], 3)
    for backend in BACKENDS:
        got = _load_plainly([(cls_file, pixels), (det_file, det_pixels)], tmp_path, backend)
        _assert_close(got[0], cls_expected, atol=1e-4)
        _assert_close(got[1], det_expected, atol=1e-4)

    # `cvbench eval` of the exported classifier gives the checkpoint's numbers
    results = {}
    for name, checkpoint in (("file", cls_file), ("checkpoint", cls_dir)):
        out = tmp_path / f"eval_{name}.json"
        argv = [*CLASSIFIER, "--precision", "fp32", "--checkpoint", str(checkpoint)]
        assert cli.main(["eval", *argv, "--json", str(out)]) == 0
        results[name] = json.loads(out.read_text())
    assert results["file"].keys() == results["checkpoint"].keys() >= {"loss", "top1"}
    for key, value in results["checkpoint"].items():
        assert results["file"][key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


def test_eval_refuses_a_file_of_the_other_task(tmp_path, capsys):
    from cvbench.utils.model_file import ModelInfo, save_model

    inputs = keras.Input((32, 32, 3))
    model = keras.Model(inputs, keras.layers.Dense(4)(keras.layers.Flatten()(inputs)))
    info = ModelInfo(task="detection", class_names=("a",), image_size=(32, 32),
                     resize="stretch", detection={"anchors": {}, "scales": [1, 1, 1, 1],
                                                  "postprocess": {}})  # fmt: skip
    # a file save_model refuses to write (its info contradicts the model): made by hand
    path = save_model(model, tmp_path / "det.keras")
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("cvbench.json", json.dumps(info.to_dict()))
    code = cli.main(["eval", *CLASSIFIER, "--checkpoint", str(path)])
    assert code != 0
    assert "is a detection model, not classification" in capsys.readouterr().err


@pytest.mark.slow
def test_the_demo_files_load_with_plain_keras_and_agree(tmp_path):
    from cvbench.demo import run
    from cvbench.demo.classify import classification_task
    from cvbench.demo.config import DemoConfig
    from cvbench.demo.data import DemoData
    from cvbench.demo.detect import demo_ssd
    from cvbench.demo.shapes import SHAPE_NAMES

    config = DemoConfig.quick()
    classifier = classification_task(DemoData.under(tmp_path / "data"), config).build_model()
    ssd = demo_ssd(config, num_classes=len(SHAPE_NAMES), classifier=classifier)
    rng = np.random.default_rng(1)
    for v in ssd.non_trainable_weights:  # batch-norm statistics that matter
        v.assign(rng.uniform(0.5, 1.5, tuple(v.shape)).astype("float32"))
    Stage = dataclasses.make_dataclass("Stage", ["model"])
    (tmp_path / run.STAGING).mkdir()
    run._save_models(tmp_path, config, Stage(classifier), Stage(ssd))
    cls_file, det_file = (
        tmp_path / run.STAGING / "classifier.keras",
        tmp_path / run.STAGING / "ssd.keras",
    )
    cls_info, det_info = read_model_info(cls_file), read_model_info(det_file)
    # The classifier: build_imagenet's label order (sorted folders); the SSD: COCO id - 1.
    assert cls_info.class_names == tuple(sorted(SHAPE_NAMES))
    assert det_info.class_names == tuple(SHAPE_NAMES)
    assert cls_info.resize == "stretch"  # shapes_preprocessing resizes to S x S
    assert det_info.image_size == (config.det_image_size,) * 2

    side, det_side = config.cls_image_size, config.det_image_size
    pixels = rng.uniform(0, 255, (2, side, side, 3)).astype("float32")
    det_pixels = rng.uniform(0, 255, (2, det_side, det_side, 3)).astype("float32")
    normalized = (pixels - np.array(IMAGENET_MEAN_RGB)) / np.array(IMAGENET_STD_RGB)
    cls_expected = _numpy(classifier(normalized.astype("float32")))
    det_expected = _numpy(ssd(det_pixels))
    for backend in BACKENDS:
        got = _load_plainly([(cls_file, pixels), (det_file, det_pixels)], tmp_path, backend)
        _assert_close(got[0], cls_expected, atol=1e-4)
        _assert_close(got[1], det_expected, atol=1e-4)
