"""`cvbench export`: flags reach `export_for_serving`; errors are one line."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import cvbench.cli as cli
from cvbench.inference import ModelInfo, save_model
from cvbench.models import resnet18


@pytest.fixture(autouse=True)
def with_export_command(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.export",))


@pytest.fixture
def model_file(tmp_path):
    model = resnet18(input_shape=(32, 32, 3), num_classes=4, classifier_activation=None)
    info = ModelInfo(task="classification", class_names=tuple("abcd"), image_size=(32, 32))
    return save_model(model, tmp_path / "m.keras", info)


def test_exports_a_model_file(model_file, tmp_path, capsys):
    out = tmp_path / "served"
    assert cli.main(["export", str(model_file), "--output", str(out), "--top-k", "2"]) == 0
    info_file = tmp_path / "served_info.json"
    assert capsys.readouterr().out.strip() == f"wrote {out} and its info file {info_file}"
    assert info_file.is_file()
    serve = tf.saved_model.load(str(out)).signatures["serving_default"]
    result = serve(images=tf.zeros((1, 32, 32, 3), tf.uint8))
    assert result["top_k_indices"].shape == (1, 2)
    np.testing.assert_allclose(result["probabilities"].numpy().sum(), 1.0, rtol=1e-5)


def test_errors_are_one_line(model_file, tmp_path, capsys):
    missing = tmp_path / "nope.keras"
    assert cli.main(["export", str(missing), "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == f"cvbench: error: no model file {missing}"
    (tmp_path / "o").mkdir()
    assert cli.main(["export", str(model_file), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"cvbench: error: {tmp_path / 'o'} exists; pass --overwrite to replace it"
    # a file of the user's where the info file goes: refused before TensorFlow is imported
    (tmp_path / "p_info.json").write_text("mine")
    assert cli.main(["export", str(model_file), "--output", str(tmp_path / "p"),
                     "--overwrite"]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip() == (
        f"cvbench: error: {tmp_path / 'p_info.json'} exists and was not written by cvbench; "
        "--overwrite replaces only cvbench's own outputs: move it or write elsewhere"
    )
    assert not (tmp_path / "p").exists()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", str(model_file), "--output", "x", "--format", "onnx"])
    assert exit_info.value.code == 2 and "invalid choice: 'onnx'" in capsys.readouterr().err


def test_a_file_without_model_info_is_an_error(tmp_path, capsys):
    bare = resnet18(input_shape=(32, 32, 3), num_classes=4)
    path = save_model(bare, tmp_path / "bare.keras")  # no cvbench.json
    # A bad input file (exit 1, `require_model_info`), refused before Keras loads it.
    assert cli.main(["export", str(path), "--output", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"cvbench export: error: {path} holds no ModelInfo (no cvbench.json entry: its class "
        "names, input size and resize rule); cvbench writes one into every model file it "
        "saves: write it with cvbench.inference.save_model(model, path, info)"
    )


@pytest.mark.parametrize(
    ("flags", "threshold"),
    [([], 0.5), (["--score-threshold", "0.2"], 0.2), (["--coco-threshold"], None)],
)
def test_the_threshold_flags(tmp_path, monkeypatch, flags, threshold):
    # predict's 0.5 by default; --coco-threshold: the file's own (None to export_for_serving);
    # a detector's flags (a classifier refuses them, as predict: tests/cli/test_s49_kind_flags)
    from inference_models import constant_detector, detector_info

    import cvbench.inference
    import cvbench.inference.export

    model_file = save_model(constant_detector(), tmp_path / "det.keras", detector_info())

    seen = {}

    def fake(model, output, **kwargs):
        seen.update(kwargs)
        return output

    monkeypatch.setattr(cvbench.inference.export, "export_for_serving", fake)
    monkeypatch.setattr(cvbench.inference, "export_for_serving", fake, raising=False)
    assert cli.main(["export", str(model_file), "--output", str(tmp_path / "o"), *flags]) == 0
    assert seen["score_threshold"] == threshold


def test_one_threshold_flag_at_a_time(model_file, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", str(model_file), "--output", "o", "--coco-threshold",
                  "--score-threshold", "0.3"])  # fmt: skip
    assert exit_info.value.code == 2
    assert "not allowed with argument --coco-threshold" in capsys.readouterr().err
