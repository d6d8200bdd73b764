"""A class name that is not valid UTF-8 text (bytes that are not UTF-8, such as a class folder
named with the byte 0xff, which Python decodes into the surrogate '\\udcff'; or a JSON
'\\ud800' escape) is refused where it enters: the builder's and the reader's `ClassInfo`
(build-imagenet, dataset_info.json) and `ModelInfo` (a model file's cvbench.json, a
checkpoint's names, the Python API), in one line naming it with `ascii()`, so `predict`,
`classify` and `export` agree: each refuses the same file with the same line.

Before: build-imagenet wrote the name into dataset_info.json, train put it into the model
file, predict printed it, and `cvbench export` failed with a UnicodeEncodeError traceback in
`cvbench.inference.serving.class_name_tensor` (a TensorFlow string is UTF-8).
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info
from PIL import Image

from cvbench import cli
from cvbench.data.dataset_info import ClassInfo, DatasetInfo, read_dataset_info
from cvbench.inference import ModelInfo, classify, save_model
from cvbench.utils.errors import BadFileError

_WHY = "is not valid UTF-8 (each \\udcXX is a byte XX that is not UTF-8, e.g. in a folder name)"


@pytest.mark.parametrize(("name", "shown"), [("r\udcff", "'r\\udcff'"), ("\ud800", "'\\ud800'")])
def test_model_info_refuses_a_name_that_is_not_utf8(name, shown):
    with pytest.raises(ValueError) as e:
        ModelInfo(task="classification", class_names=("ok", name), image_size=(8, 8))
    assert str(e.value) == f"class name {shown} {_WHY}; rename it"


def test_other_text_is_accepted():
    names = ("café", "東京", "a b")
    info = ModelInfo(task="classification", class_names=names, image_size=(8, 8))
    assert info.class_names == names


@pytest.fixture
def bad_model(tmp_path):
    """A model file whose cvbench.json names a class 'r\\udcff' (as an older cvbench wrote
    a class folder named b'r\\xff')."""
    path = save_model(channel_classifier(), tmp_path / "bad.keras")  # without info
    doc = {**classifier_info().to_dict(), "class_names": ["r\udcff", "green", "blue"]}
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("cvbench.json", json.dumps(doc))  # "r\udcff" escaped: valid JSON
    return path


def _line(path):
    return f"{path}: cvbench.json: class name 'r\\udcff' {_WHY}; rename it"


def test_predict_classify_and_export_refuse_it_alike(bad_model, tmp_path, capsys):
    image = tmp_path / "i.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    with pytest.raises(BadFileError) as e:
        classify(bad_model, [str(image)])
    assert str(e.value) == _line(bad_model)
    assert cli.main(["predict", str(bad_model), str(image)]) == 1
    assert capsys.readouterr() == ("", f"cvbench predict: error: {_line(bad_model)}\n")
    out = tmp_path / "served"
    assert cli.main(["export", str(bad_model), "--output", str(out)]) == 1
    assert capsys.readouterr() == ("", f"cvbench export: error: {_line(bad_model)}\n")
    assert not out.exists() and not (tmp_path / "served_info.json").exists()


def test_dataset_info_refuses_it_at_the_build_and_at_the_read(tmp_path):
    with pytest.raises(ValueError) as e:
        DatasetInfo(kind="imagenet", label_offset=1, classes=(ClassInfo("b\udcff"),))
    assert str(e.value) == f"class 'b\\udcff' {_WHY}; rename it"
    with pytest.raises(ValueError) as e:
        ClassInfo("n01", name="tench\udce9")
    assert str(e.value) == f"class name 'tench\\udce9' {_WHY}; rename it"
    good = DatasetInfo(kind="imagenet", label_offset=1, classes=(ClassInfo("b"),)).to_json()
    good["classes"][0]["id"] = "b\udcff"
    (tmp_path / "dataset_info.json").write_text(json.dumps(good))
    with pytest.raises(BadFileError) as e:
        read_dataset_info(tmp_path)
    assert str(e.value) == (
        f"{tmp_path / 'dataset_info.json'} is not a valid dataset metadata file: class "
        f"'b\\udcff' {_WHY}; rename it"
    )


def test_build_imagenet_refuses_a_class_folder_that_is_not_utf8(tmp_path, capsys):
    raw = os.fsencode(tmp_path / "raw")
    for folder in (b"b\xff", b"ok"):
        os.makedirs(raw + b"/train/" + folder)
        Image.new("RGB", (8, 8)).save(os.fsdecode(raw + b"/train/" + folder + b"/0.jpg"))
    out = tmp_path / "rec"
    argv = ["build-imagenet", "--raw-dir", os.fsdecode(raw), "--output-dir", str(out)]
    assert cli.main([*argv, "--train-shards", "1"]) == 2
    lines = capsys.readouterr().err.splitlines()  # the "found 2 classes" progress line first
    assert lines[-1] == f"cvbench: error: class 'b\\udcff' {_WHY}; rename it"
    assert len(lines) == 2
    assert not out.exists() or os.listdir(out) == []  # no shard, no dataset_info.json
