"""A `.keras` file without cvbench's ModelInfo is a bad input file: `predict` and `export`
exit 1 with one line naming the file and what is missing (`require_model_info`, the one
check both use; `predict` exited 2, a bad argument, before). `eval --checkpoint` uses such
a file as it is (older exports), a Sequential one included (it ended in a traceback:
`AttributeError: The layer sequential has never been called ...`)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from PIL import Image

from cvbench import cli
from cvbench.utils.errors import BadFileError
from cvbench.utils.model_file import require_model_info

MISSING = (
    "holds no ModelInfo (no cvbench.json entry: its class names, input size and resize "
    "rule); cvbench writes one into every model file it saves: write it with "
    "cvbench.inference.save_model(model, path, info)"
)


def _plain(tmp_path, classes: int, *, sequential: bool):
    layers = [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes)]
    if sequential:
        model = keras.Sequential([keras.Input((8, 8, 3)), *layers])
    else:
        inputs = keras.Input((8, 8, 3))
        model = keras.Model(inputs, layers[1](layers[0](inputs)))
    path = tmp_path / ("seq.keras" if sequential else "functional.keras")
    model.save(path)
    return path


@pytest.mark.parametrize("sequential", [True, False])
@pytest.mark.parametrize("command", ["predict", "export"])
def test_a_model_file_without_model_info_is_exit_1_and_one_line(
    tmp_path, capsys, command, sequential
):
    path = _plain(tmp_path, 2, sequential=sequential)
    image = tmp_path / "a.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    out = tmp_path / "out"
    argv = {"predict": ["predict", str(path), str(image)],
            "export": ["export", str(path), "--output", str(out)]}[command]  # fmt: skip
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err == f"cvbench {command}: error: {path} {MISSING}\n"
    assert captured.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_require_model_info_is_a_bad_file_error(tmp_path):
    path = _plain(tmp_path, 2, sequential=False)
    with pytest.raises(BadFileError) as error:
        require_model_info(path)
    assert str(error.value) == f"{path} {MISSING}"


@pytest.mark.parametrize("sequential", [True, False])
def test_eval_of_a_plain_model_file_names_its_classes_not_a_traceback(tmp_path, capsys, sequential):
    # 2 classes in the file, 3 in the synthetic data: the one-line class-count refusal
    # (exit 2), from the model's outputs (a Sequential has no `output` once loaded).
    path = _plain(tmp_path, 2, sequential=sequential)
    argv = ["eval", "--checkpoint", str(path), "--model", "resnet18", "--synthetic",
            "--num-classes", "3", "--image-size", "8", "--batch-size", "2"]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "2 classes" in err and "3" in err, err
