"""`cvbench eval --checkpoint` of a serving export (a TFLite file, a SavedModel folder) says
it is one, by the rule `predict` and `export` use (`refuse_serving_export`), instead of
asking for `--model` (without one) or calling it no cvbench checkpoint (with one)."""

from __future__ import annotations

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info
from PIL import Image

import cvbench.cli
from cvbench.inference import save_model
from cvbench.inference.export import export_for_serving

SERVING = (
    "an export for serving (TensorFlow Serving, TFLite); cvbench reads the .keras model file "
    "it was exported from (a training run's RUN/export/model.keras)"
)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """The tiny classifier's model file, and its SavedModel and TFLite exports."""
    folder = tmp_path_factory.mktemp("exports")
    model = save_model(channel_classifier(), folder / "cls.keras", classifier_info())
    saved = export_for_serving(model, folder / "served")
    tflite = export_for_serving(model, folder / "cls.tflite", format="tflite")
    return folder, saved, tflite


def _eval(argv, capsys):
    code = cvbench.cli.main(["eval", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind", ["a SavedModel folder", "a TFLite file"])
@pytest.mark.parametrize("flags", [[], ["--model", "resnet18"]])
def test_eval_of_a_serving_export_says_so(exports, capsys, kind, flags):
    _, saved, tflite = exports
    path = saved if kind == "a SavedModel folder" else tflite
    code, out, err = _eval(["--checkpoint", path, "--synthetic", *flags], capsys)
    # a bad input file: exit 1, one line (it was exit 2 "--model (or --recipe)" required,
    # or, with --model, "is not a cvbench checkpoint: it is not an .npz archive")
    assert (code, out) == (1, "")
    assert err == f"cvbench eval: error: {path} is {kind}, {SERVING}\n"


def test_a_folder_named_with_a_slash_is_the_same_folder(exports, capsys):
    _, saved, _ = exports
    code, _, err = _eval(["--checkpoint", f"{saved}/", "--synthetic"], capsys)
    assert code == 1 and err == f"cvbench eval: error: {saved} is a SavedModel folder, {SERVING}\n"


def test_predict_gives_the_same_line(exports, capsys):
    folder, _, tflite = exports
    image = folder / "a.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    assert cvbench.cli.main(["predict", str(tflite), str(image)]) == 1
    assert capsys.readouterr().err == (
        f"cvbench predict: error: {tflite} is a TFLite file, {SERVING}\n"
    )
