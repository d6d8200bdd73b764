"""`cvbench predict` and `cvbench export` share one rule for the flags of a model file's kind
(`cvbench.cli.predict.check_flags_fit`): a classifier takes no score threshold, a detector no
top-k, a `--top-k` over the classifier's class count is refused naming both, and
`--score-threshold` is in `[0, 1)` by the Python API's rule (`check_score_threshold`)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info, constant_detector, detector_info
from PIL import Image

import cvbench.cli
import cvbench.inference
import cvbench.inference.export
from cvbench.cli.args import score_threshold
from cvbench.cli.errors import CLIError
from cvbench.cli.predict import check_flags_fit
from cvbench.inference import save_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The tiny classifier (3 classes: red, green, blue) and detector of `inference_models`."""
    folder = tmp_path_factory.mktemp("models")
    cls = save_model(channel_classifier(), folder / "cls.keras", classifier_info())
    det = save_model(constant_detector(), folder / "det.keras", detector_info())
    image = folder / "a.png"
    # channel means (10, 30, 20): logits (1, 3, 2), "green" then "blue" then "red"
    Image.fromarray(np.full((8, 8, 3), (10, 30, 20), np.uint8)).save(image)
    return cls, det, image


@pytest.fixture
def no_export(monkeypatch):
    """`export_for_serving` replaced: records its keyword arguments, writes nothing."""
    seen = {}

    def fake(model, output, **kwargs):
        seen.update(kwargs)
        return output

    # The package's name first: reading it (to restore it) loads the real function into the
    # lazy package's globals; read after the module's was patched, it cached the fake, which
    # the teardown then "restored", and every later export in the process wrote nothing.
    monkeypatch.setattr(cvbench.inference, "export_for_serving", fake)
    monkeypatch.setattr(cvbench.inference.export, "export_for_serving", fake)
    return seen


def _run(argv, capsys):
    code = cvbench.cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cvbench.cli.main([str(a) for a in argv])
    assert exit_info.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("command", ["predict", "export"])
def test_a_top_k_over_the_class_count_is_refused_naming_both(models, tmp_path, capsys, command,
                                                             no_export):  # fmt: skip
    cls, _, image = models
    where = [image] if command == "predict" else ["--output", tmp_path / "o"]
    code, out, err = _run([command, cls, *where, "--top-k", "100000"], capsys)
    assert (code, out) == (2, "")
    # the classifier of `inference_models` has 3 classes
    assert err == (
        f"cvbench: error: --top-k 100000: {cls} is a classifier of 3 classes; pass --top-k 3 "
        "or less\n"
    )
    assert no_export == {} and not (tmp_path / "o").exists()
    # 4 = 3 + 1, the first value over the count, is refused too; 3 itself is taken
    assert _run([command, cls, *where, "--top-k", "4"], capsys)[0] == 2
    code, out, _ = _run([command, cls, *where, "--top-k", "3"], capsys)
    assert code == 0
    if command == "predict":  # every class, best first: softmax(1, 3, 2), as below
        assert out == f"{image}  green 0.665 | blue 0.245 | red 0.090\n"
    else:
        assert no_export["top_k"] == 3


def test_predicts_default_top_k_is_cut_to_the_class_count(models, capsys):
    cls, _, image = models
    code, out, _ = _run(["predict", cls, image], capsys)
    # softmax(1, 3, 2) = (0.090, 0.665, 0.245): the default 5 shows the 3 classes there are
    assert (code, out) == (0, f"{image}  green 0.665 | blue 0.245 | red 0.090\n")


def test_exports_default_top_k_is_five(models, tmp_path, capsys, no_export):
    cls, _, _ = models
    assert _run(["export", cls, "--output", tmp_path / "o"], capsys)[0] == 0
    assert no_export["top_k"] == 5  # export_for_serving cuts it to the 3 classes


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--score-threshold", "0.3"], "--score-threshold"),
        (["--coco-threshold"], "--coco-threshold"),
    ],
)
def test_export_refuses_a_threshold_for_a_classifier(models, tmp_path, capsys, no_export,
                                                     flags, named):  # fmt: skip
    cls, _, _ = models
    code, out, err = _run(["export", cls, "--output", tmp_path / "o", *flags], capsys)
    assert (code, out) == (2, "")
    # the line predict gives for the same flag
    assert err == f"cvbench: error: {cls} is a classifier: {named} does not apply to it\n"
    assert no_export == {}


def test_export_refuses_a_top_k_for_a_detector(models, tmp_path, capsys, no_export):
    _, det, image = models
    for command, where in (("export", ["--output", tmp_path / "o"]), ("predict", [image])):
        code, out, err = _run([command, det, *where, "--top-k", "3"], capsys)
        assert (code, out) == (2, "")
        assert err == f"cvbench: error: {det} is a detector: --top-k does not apply to it\n"
    assert no_export == {}


@pytest.mark.parametrize("command", ["predict", "export"])
@pytest.mark.parametrize("text", ["2", "1", "-0.1", "nan", "inf", "-inf", "x"])
def test_a_score_threshold_outside_0_1_is_a_usage_error(models, tmp_path, capsys, command,
                                                        text):  # fmt: skip
    _, det, image = models
    where = [image] if command == "predict" else ["--output", tmp_path / "o"]
    # `=`: argparse takes a separate "-inf" for an option
    last = _usage_error([command, det, *where, f"--score-threshold={text}"], capsys)
    assert last == (
        f"cvbench {command}: error: argument --score-threshold: must be in [0, 1), got "
        f"'{text}' (see cvbench {command} --help)"
    )


def test_export_passes_a_detectors_thresholds(models, tmp_path, capsys, no_export):
    _, det, _ = models
    out = tmp_path / "o"
    assert _run(["export", det, "--output", out, "--score-threshold", "0"], capsys)[0] == 0
    assert no_export["score_threshold"] == 0.0  # 0 is in [0, 1): keeps every box
    assert _run(["export", det, "--output", out, "--coco-threshold"], capsys)[0] == 0
    assert no_export["score_threshold"] is None  # the model file's own
    assert _run(["export", det, "--output", out], capsys)[0] == 0
    assert no_export["score_threshold"] == 0.5  # predict's default


def test_the_shared_rule_and_type():
    assert score_threshold("0") == 0.0 and score_threshold("0.999") == 0.999
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be in \[0, 1\), got '1'"):
        score_threshold("1")
    # flags a command does not have are not given: predict has no --coco-threshold
    check_flags_fit(argparse.Namespace(model="m", top_k=None), "detection", 2)
    given = argparse.Namespace(model="m", top_k=None, score_threshold=0.2, box_format="xywh")
    with pytest.raises(CLIError, match="^m is a classifier: --score-threshold, --box-format "):
        check_flags_fit(given, "classification", 3)


def test_the_fake_export_is_gone_after_the_tests_that_used_it():
    # runs after the tests above (file order): the real function is back in both places
    from cvbench.inference.export import export_for_serving

    assert cvbench.inference.export_for_serving is export_for_serving
    assert export_for_serving.__module__ == "cvbench.inference.export"
